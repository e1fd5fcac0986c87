-- Application-managed secrets (spec: popagent_secrets, popagent_secret_bindings).
-- Values exist here only as AES-256-GCM ciphertext; the associated data binds each
-- ciphertext to (resource_id, name, key_id), so a row moved or copied elsewhere fails
-- authentication instead of decrypting.
CREATE TABLE popagent_secrets (
    resource_id text NOT NULL CHECK (length(resource_id) BETWEEN 1 AND 128),
    name text NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    -- Which key sealed the row (first 8 bytes of a SHA-256 of the key, hex): rotation
    -- finds the rows still on an older key with `key_id <> current`.
    key_id text NOT NULL CHECK (key_id ~ '^[0-9a-f]{16}$'),
    nonce bytea NOT NULL CHECK (octet_length(nonce) = 12),
    -- ciphertext || 16-byte tag
    ciphertext bytea NOT NULL CHECK (octet_length(ciphertext) >= 16),
    created_at timestamptz NOT NULL DEFAULT now(),
    -- When the value last changed (provisioned or rotated); re-encryption keeps it.
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_id, name)
);

CREATE INDEX popagent_secrets_key_id ON popagent_secrets (key_id);

-- Metadata only: the exact https origins (canonical scheme://host[:port]) a secret may be
-- filled into.
CREATE TABLE popagent_secret_bindings (
    resource_id text NOT NULL,
    name text NOT NULL,
    origin text NOT NULL CHECK (origin ~ '^https://[^/?#@*\s]+$'),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_id, name, origin),
    FOREIGN KEY (resource_id, name) REFERENCES popagent_secrets (resource_id, name) ON DELETE CASCADE
);

-- Encryptions performed under each key, counted in the same transaction as the write:
-- with random 96-bit nonces a key must not seal more than 2^32 values (NIST SP 800-38D).
CREATE TABLE popagent_secret_key_usage (
    key_id text PRIMARY KEY CHECK (key_id ~ '^[0-9a-f]{16}$'),
    encryptions bigint NOT NULL CHECK (encryptions >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
