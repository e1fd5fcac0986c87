-- Queries of long-term memories (popagent_memories): the memories API, `remember`, retention, and
-- the memories relevant to a prompt.

-- name: list_memories
SELECT id, content, source, session_id, turn_id, created_at, updated_at, kind, pinned
FROM popagent_memories
WHERE $1::text = '' OR search @@ websearch_to_tsquery('english', $1)
ORDER BY updated_at DESC, id
LIMIT $2

-- name: get_memory
SELECT id, content, source, session_id, turn_id, created_at, updated_at, kind, pinned FROM popagent_memories WHERE id = $1

-- name: insert_memory
-- An identical fact (ignoring case) is kept once: the existing row comes back instead.
WITH inserted AS (
    INSERT INTO popagent_memories (id, content, source, session_id, turn_id, kind, pinned)
    VALUES ($1, $2, $3, $4, $5, $6, $7)
    ON CONFLICT (md5(lower(content))) DO NOTHING
    RETURNING id, content, source, session_id, turn_id, created_at, updated_at, kind, pinned, true AS created
)
SELECT id, content, source, session_id, turn_id, created_at, updated_at, kind, pinned, created FROM inserted
UNION ALL
SELECT id, content, source, session_id, turn_id, created_at, updated_at, kind, pinned, false AS created
FROM popagent_memories
WHERE md5(lower(content)) = md5(lower($2)) AND NOT EXISTS (SELECT 1 FROM inserted)

-- name: update_memory
-- NULL keeps a field as it is.
UPDATE popagent_memories
SET content = coalesce($2, content), kind = coalesce($3, kind), pinned = coalesce($4, pinned), updated_at = now()
WHERE id = $1
RETURNING id, content, source, session_id, turn_id, created_at, updated_at, kind, pinned

-- name: delete_memory
DELETE FROM popagent_memories WHERE id = $1

-- name: similar_memories
-- Candidates for a near-duplicate of $1: memories sharing any of its stemmed words, best first,
-- with their lexemes (the caller compares the word sets).
WITH query AS (
    SELECT to_tsquery('simple', string_agg(quote_literal(lexeme), ' | ')) AS q
    FROM unnest(tsvector_to_array(to_tsvector('english', $1))) AS lexeme
)
SELECT m.id, m.content, m.source, m.session_id, m.turn_id, m.created_at, m.updated_at, m.kind, m.pinned,
       tsvector_to_array(m.search) AS lexemes, tsvector_to_array(to_tsvector('english', $1)) AS new_lexemes
FROM popagent_memories m, query
WHERE query.q IS NOT NULL AND m.search @@ query.q
ORDER BY ts_rank_cd(m.search, query.q) DESC, m.updated_at DESC
LIMIT 5

-- name: merge_memory
-- `remember` restating a memory: the newer statement replaces it (never a pinned one).
UPDATE popagent_memories
SET content = $2, kind = $3, session_id = coalesce($4, session_id), turn_id = coalesce($5, turn_id), updated_at = now()
WHERE id = $1 AND NOT pinned
RETURNING id, content, source, session_id, turn_id, created_at, updated_at, kind, pinned

-- name: sweep_memories
-- Retention: agent-written, unpinned memories not written for $1 days are forgotten.
DELETE FROM popagent_memories
WHERE source = 'agent' AND NOT pinned AND updated_at < now() - make_interval(days => $1)

-- name: unembedded_memories
SELECT m.id, m.content, md5(m.content) AS content_md5
FROM popagent_memories m
LEFT JOIN popagent_memory_embeddings e ON e.memory_id = m.id AND e.model = $1
WHERE e.memory_id IS NULL OR e.content_md5 <> md5(m.content)
LIMIT $2

-- name: store_memory_embeddings
INSERT INTO popagent_memory_embeddings (memory_id, model, content_md5, embedding)
SELECT i, $4, h, e::vector FROM unnest($1::uuid[], $2::text[], $3::text[]) AS x(i, h, e)
ON CONFLICT (memory_id, model) DO UPDATE SET content_md5 = excluded.content_md5, embedding = excluded.embedding

-- name: nearest_memories
SELECT m.id, m.content
FROM popagent_memory_embeddings e JOIN popagent_memories m ON m.id = e.memory_id
WHERE e.model = $2
ORDER BY e.embedding <=> $1::vector
LIMIT $3

-- name: recall_memories
-- Cross-session recall: the memories sharing the most (stemmed) words with the prompt,
-- ranked by ts_rank_cd. Any word may match (an OR query built from the prompt's own
-- lexemes); a memory sharing none is not recalled.
WITH query AS (
    SELECT to_tsquery('simple', string_agg(quote_literal(lexeme), ' | ')) AS q
    FROM unnest(tsvector_to_array(to_tsvector('english', $1))) AS lexeme
)
SELECT m.id, m.content, ts_rank_cd(m.search, query.q) AS rank
FROM popagent_memories m, query
WHERE query.q IS NOT NULL AND m.search @@ query.q
ORDER BY rank DESC, m.updated_at DESC
LIMIT $2
