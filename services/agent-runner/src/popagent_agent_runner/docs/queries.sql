-- Documentation RAG (docs/store.py). Every read and write names its workspace.

-- name: get_index
SELECT workspace_id, include_globs, exclude_globs, state, embedding_model, files_seen, files_to_embed,
       files_embedded, files_removed, chunks_embedded, error, requested_at, started_at, finished_at, updated_at
FROM popagent_document_indexes WHERE workspace_id = $1

-- name: request_index
-- Queue a run; globs left NULL keep what the workspace has (or the defaults on its first run).
INSERT INTO popagent_document_indexes AS i (workspace_id, include_globs, exclude_globs, state, requested_at)
VALUES ($1, coalesce($2::text[], $4::text[]), coalesce($3::text[], '{}'), 'queued', now())
ON CONFLICT (workspace_id) DO UPDATE
SET include_globs = coalesce($2::text[], i.include_globs),
    exclude_globs = coalesce($3::text[], i.exclude_globs),
    state = CASE WHEN i.state = 'running' THEN 'running' ELSE 'queued' END,
    requested_at = now(), updated_at = now()
RETURNING workspace_id, include_globs, exclude_globs, state, embedding_model, files_seen, files_to_embed,
          files_embedded, files_removed, chunks_embedded, error, requested_at, started_at, finished_at, updated_at

-- name: pending_indexes
SELECT workspace_id FROM popagent_document_indexes WHERE state IN ('queued', 'running') ORDER BY requested_at

-- name: start_run
UPDATE popagent_document_indexes
SET state = 'running', embedding_model = $2, started_at = now(), finished_at = NULL, error = '',
    files_seen = 0, files_to_embed = 0, files_embedded = 0, files_removed = 0, chunks_embedded = 0,
    updated_at = now()
WHERE workspace_id = $1
RETURNING include_globs, exclude_globs, requested_at

-- name: run_planned
UPDATE popagent_document_indexes
SET files_seen = $2, files_to_embed = $3, files_removed = $4, updated_at = now()
WHERE workspace_id = $1

-- name: run_progress
UPDATE popagent_document_indexes
SET files_embedded = files_embedded + $2, chunks_embedded = chunks_embedded + $3, updated_at = now()
WHERE workspace_id = $1

-- name: finish_run
-- Back to queued when another run was asked for while this one ran (it starts again at once).
UPDATE popagent_document_indexes
SET state = CASE WHEN requested_at > $2 THEN 'queued' ELSE 'idle' END,
    finished_at = now(), updated_at = now()
WHERE workspace_id = $1
RETURNING state

-- name: fail_run
UPDATE popagent_document_indexes
SET state = 'failed', error = $2, finished_at = now(), updated_at = now()
WHERE workspace_id = $1

-- name: try_lock_workspace
SELECT pg_try_advisory_lock(hashtextextended('popagent-docs-index:' || $1, 0))

-- name: unlock_workspace
SELECT pg_advisory_unlock(hashtextextended('popagent-docs-index:' || $1, 0))

-- name: file_states
SELECT id, path, content_hash, embedded_hash, embedded_model
FROM popagent_documents WHERE workspace_id = $1 AND origin = 'file'

-- name: delete_documents
DELETE FROM popagent_documents WHERE workspace_id = $1 AND id = ANY ($2::text[])

-- name: upsert_file_document
INSERT INTO popagent_documents AS d (id, workspace_id, origin, path, title, content, content_hash)
VALUES ($1, $2, 'file', $3, $4, $5, $6)
ON CONFLICT (workspace_id, path) DO UPDATE
SET title = excluded.title, content = excluded.content, content_hash = excluded.content_hash, updated_at = now()
WHERE d.origin = 'file'
RETURNING id

-- name: insert_api_document
INSERT INTO popagent_documents (id, workspace_id, origin, path, title, content, content_hash)
VALUES ($1, $2, 'api', $3, $4, $5, $6)
ON CONFLICT (workspace_id, path) DO NOTHING
RETURNING id

-- name: update_api_document
UPDATE popagent_documents
SET path = $3, title = $4, content = $5, content_hash = $6, updated_at = now()
WHERE workspace_id = $1 AND id = $2 AND origin = 'api'
RETURNING id

-- name: delete_chunks
DELETE FROM popagent_document_chunks WHERE document_id = $1

-- name: insert_chunks
-- A document's chunks in one statement (arrays of equal length, one element per chunk).
INSERT INTO popagent_document_chunks
    (document_id, workspace_id, path, ordinal, heading_path, content, model, dims, embedding, search_text)
SELECT $1, $2, $3, c.ordinal, string_to_array(c.heading, E'\x1f'), c.content, $4, $5, c.embedding::vector,
       setweight(to_tsvector('english', replace(c.heading, E'\x1f', ' ')), 'A')
       || setweight(to_tsvector('english', translate($3, '/._-', '    ')), 'B')
       || to_tsvector('english', c.content)
FROM unnest($6::int[], $7::text[], $8::text[], $9::text[]) AS c (ordinal, heading, content, embedding)

-- name: mark_embedded
UPDATE popagent_documents
SET embedded_hash = content_hash, embedded_model = $2, chunk_count = $3
WHERE id = $1

-- name: list_documents
SELECT id, workspace_id, origin, path, title, content_hash, embedded_hash, embedded_model, chunk_count,
       length(content) AS chars, created_at, updated_at
FROM popagent_documents
WHERE workspace_id = $1 AND ($2::text = '' OR path LIKE $2 ESCAPE '\') AND ($4::text = '' OR path > $4)
ORDER BY path LIMIT $3

-- name: count_documents
SELECT count(*) AS documents, coalesce(sum(chunk_count), 0)::bigint AS chunks
FROM popagent_documents WHERE workspace_id = $1

-- name: get_document
SELECT id, workspace_id, origin, path, title, content, content_hash, embedded_hash, embedded_model, chunk_count,
       length(content) AS chars, created_at, updated_at
FROM popagent_documents WHERE workspace_id = $1 AND id = $2

-- name: delete_api_document
DELETE FROM popagent_documents WHERE workspace_id = $1 AND id = $2 AND origin = 'api' RETURNING id

-- name: vector_candidates
-- `{dims}` is the model's dimension (an integer the code checks), written in so the partial HNSW
-- index for it applies. Filtering by workspace happens on the index's candidates.
SELECT id, document_id, path, heading_path, content,
       embedding::vector({dims}) <=> $3::text::vector({dims}) AS distance
FROM popagent_document_chunks
WHERE workspace_id = $1 AND model = $2 AND dims = {dims} AND ($4::text = '' OR path LIKE $4 ESCAPE '\')
ORDER BY embedding::vector({dims}) <=> $3::text::vector({dims})
LIMIT $5

-- name: vector_candidates_exact
-- The same ranking by an exact scan of the workspace's chunks: used when the index's candidates,
-- filtered to the workspace, come up short (pgvector 0.6 filters after the index scan).
WITH scoped AS MATERIALIZED (
    SELECT id, document_id, path, heading_path, content, embedding
    FROM popagent_document_chunks
    WHERE workspace_id = $1 AND model = $2 AND dims = {dims} AND ($4::text = '' OR path LIKE $4 ESCAPE '\')
)
SELECT id, document_id, path, heading_path, content, embedding <=> $3::text::vector AS distance
FROM scoped ORDER BY distance LIMIT $5

-- name: text_candidates
-- plainto_tsquery ANDs the words, and a question rarely has all of them in one chunk, so
-- chunks having any of its words are ranked too. Ranking reads each matched chunk's vector, so
-- in a big workspace it is bounded: at most $6 chunks with all the words and $6 with some of
-- them (each in storage order) are ranked.
WITH q AS (
    SELECT plainto_tsquery('english', $3) AS every_word,
           nullif(replace(plainto_tsquery('english', $3)::text, '&', '|'), '')::tsquery AS any_word
), matched AS (
    (SELECT c.id FROM popagent_document_chunks c, q
     WHERE c.workspace_id = $1 AND c.model = $2 AND c.search_text @@ q.every_word
       AND ($4::text = '' OR c.path LIKE $4 ESCAPE '\')
     LIMIT $6)
    UNION
    (SELECT c.id FROM popagent_document_chunks c, q
     WHERE c.workspace_id = $1 AND c.model = $2 AND c.search_text @@ q.any_word
       AND ($4::text = '' OR c.path LIKE $4 ESCAPE '\')
     LIMIT $6)
)
SELECT c.id, c.document_id, c.path, c.heading_path, c.content, ts_rank_cd(c.search_text, q.any_word) AS rank
FROM popagent_document_chunks c, q
WHERE c.id IN (SELECT id FROM matched)
ORDER BY rank DESC, c.id
LIMIT $5

-- name: set_ef_search
-- HNSW candidates per search in this transaction (pgvector's default is 40).
SELECT set_config('hnsw.ef_search', $1::text, true)
