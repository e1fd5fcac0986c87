-- Workspace documentation RAG (issue 16): the documents of each workspace (its Markdown files
-- and documents added through the API), their chunks with embeddings (pgvector) and full-text
-- vectors, and each workspace's index: what it includes and how far its last run got.
CREATE EXTENSION IF NOT EXISTS vector;

-- One row per workspace that was ever indexed. `state` is the background run's: queued and
-- running rows are taken up again by the next start (a run commits file by file, so a resumed
-- run embeds only what is still missing).
CREATE TABLE popagent_document_indexes (
    workspace_id text PRIMARY KEY REFERENCES popagent_agent_workspaces (id) ON DELETE CASCADE,
    include_globs text[] NOT NULL CHECK (cardinality(include_globs) BETWEEN 1 AND 32),
    exclude_globs text[] NOT NULL CHECK (cardinality(exclude_globs) <= 32),
    state text NOT NULL CHECK (state IN ('idle', 'queued', 'running', 'failed')),
    embedding_model text NOT NULL DEFAULT '',
    files_seen integer NOT NULL DEFAULT 0 CHECK (files_seen >= 0),
    files_to_embed integer NOT NULL DEFAULT 0 CHECK (files_to_embed >= 0),
    files_embedded integer NOT NULL DEFAULT 0 CHECK (files_embedded >= 0),
    files_removed integer NOT NULL DEFAULT 0 CHECK (files_removed >= 0),
    chunks_embedded integer NOT NULL DEFAULT 0 CHECK (chunks_embedded >= 0),
    error text NOT NULL DEFAULT '',
    requested_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    finished_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX popagent_document_indexes_pending ON popagent_document_indexes (workspace_id)
    WHERE state IN ('queued', 'running');

-- `origin` file: a workspace file, kept in step by indexing (content_hash is the file's sha256).
-- `origin` api: added through /api/workspaces/:id/documents; `path` is its name there.
-- `embedded_hash` / `embedded_model`: what the stored chunks were made from.
CREATE TABLE popagent_documents (
    id text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 64),
    workspace_id text NOT NULL REFERENCES popagent_agent_workspaces (id) ON DELETE CASCADE,
    origin text NOT NULL CHECK (origin IN ('file', 'api')),
    path text NOT NULL CHECK (length(path) BETWEEN 1 AND 1024),
    title text NOT NULL CHECK (length(title) <= 500),
    content text NOT NULL,
    content_hash text NOT NULL,
    embedded_hash text NOT NULL DEFAULT '',
    embedded_model text NOT NULL DEFAULT '',
    chunk_count integer NOT NULL DEFAULT 0 CHECK (chunk_count >= 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, path)
);

-- `embedding` has no fixed dimension (the embedding model is a setting); each supported
-- dimension has a partial HNSW expression index (pgvector's "indexing with different
-- dimensions"), and search casts to the model's dimension so the planner can use it.
CREATE TABLE popagent_document_chunks (
    id bigserial PRIMARY KEY,
    document_id text NOT NULL REFERENCES popagent_documents (id) ON DELETE CASCADE,
    workspace_id text NOT NULL,
    path text NOT NULL,
    ordinal integer NOT NULL CHECK (ordinal >= 0),
    heading_path text[] NOT NULL,
    content text NOT NULL,
    model text NOT NULL,
    dims integer NOT NULL CHECK (dims BETWEEN 1 AND 2000),
    embedding vector NOT NULL,
    -- Headings weigh most, then the path, then the text (written by the insert: array_to_string is
    -- not immutable, so this cannot be a generated column).
    search_text tsvector NOT NULL,
    UNIQUE (document_id, ordinal)
);

CREATE INDEX popagent_document_chunks_scope ON popagent_document_chunks (workspace_id, model, dims, path);
CREATE INDEX popagent_document_chunks_text ON popagent_document_chunks USING gin (search_text);
CREATE INDEX popagent_document_chunks_hnsw_256 ON popagent_document_chunks
    USING hnsw ((embedding::vector(256)) vector_cosine_ops) WHERE dims = 256;
CREATE INDEX popagent_document_chunks_hnsw_384 ON popagent_document_chunks
    USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE dims = 384;
CREATE INDEX popagent_document_chunks_hnsw_512 ON popagent_document_chunks
    USING hnsw ((embedding::vector(512)) vector_cosine_ops) WHERE dims = 512;
CREATE INDEX popagent_document_chunks_hnsw_768 ON popagent_document_chunks
    USING hnsw ((embedding::vector(768)) vector_cosine_ops) WHERE dims = 768;
CREATE INDEX popagent_document_chunks_hnsw_1024 ON popagent_document_chunks
    USING hnsw ((embedding::vector(1024)) vector_cosine_ops) WHERE dims = 1024;
CREATE INDEX popagent_document_chunks_hnsw_1536 ON popagent_document_chunks
    USING hnsw ((embedding::vector(1536)) vector_cosine_ops) WHERE dims = 1536;
