-- Switchyard's first schema: everything the store keeps durably.
--
-- Later files only add (tables, nullable columns, columns with defaults,
-- indexes), so that a replica of the previous release keeps working on the
-- migrated schema during a rolling upgrade.

CREATE TABLE tenants (
    id                      text PRIMARY KEY,
    name                    text NOT NULL DEFAULT '',
    allowed_models          text[] NOT NULL DEFAULT '{}',
    requests_per_minute     bigint NOT NULL DEFAULT 0,
    tokens_per_minute       bigint NOT NULL DEFAULT 0,
    daily_token_budget      bigint NOT NULL DEFAULT 0,
    monthly_cost_budget_usd double precision NOT NULL DEFAULT 0,
    priority                integer NOT NULL DEFAULT 0,
    interactive             boolean NOT NULL DEFAULT false,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now()
);

-- Nodes come before api_keys: a node key names its node.
CREATE TABLE nodes (
    id         text PRIMARY KEY,
    name       text NOT NULL DEFAULT '',
    weight     double precision NOT NULL DEFAULT 1,
    drain      boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- tenant_id has no foreign key on purpose: deleting a tenant revokes its
-- keys but keeps them, so that the audit log and usage still resolve.
CREATE TABLE api_keys (
    id            text PRIMARY KEY,
    kind          text NOT NULL CHECK (kind IN ('client', 'admin', 'node')),
    name          text NOT NULL DEFAULT '',
    tenant_id     text,
    node_id       text REFERENCES nodes (id),
    secret_hash   bytea NOT NULL,
    secret_sealed bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz,
    CHECK (kind <> 'client' OR tenant_id IS NOT NULL),
    CHECK (kind <> 'node' OR node_id IS NOT NULL)
);

CREATE INDEX api_keys_tenant_idx ON api_keys (tenant_id) WHERE tenant_id IS NOT NULL;

-- At most one active key per node: minting a new one revokes the old one in
-- the same transaction, and this index makes any other path fail loudly.
CREATE UNIQUE INDEX api_keys_active_node_idx ON api_keys (node_id)
    WHERE kind = 'node' AND revoked_at IS NULL;

CREATE TABLE vendors (
    id             text PRIMARY KEY,
    base_url       text NOT NULL DEFAULT '',
    enabled        boolean NOT NULL DEFAULT true,
    api_key_sealed bytea,
    key_version    integer NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- models.vendor has no foreign key: the reserved vendor "local" (models that
-- nodes serve) is not a vendors row. The store checks the vendor in the
-- same transaction, under a row lock that DeleteVendor also takes.
CREATE TABLE models (
    id                    text PRIMARY KEY,
    vendor                text NOT NULL,
    upstream_model        text NOT NULL DEFAULT '',
    efforts               text[] NOT NULL DEFAULT '{}',
    capabilities          text[] NOT NULL DEFAULT '{}',
    context_window        integer NOT NULL DEFAULT 0,
    default_max_tokens    integer NOT NULL DEFAULT 0,
    queue_timeout_ms      integer NOT NULL DEFAULT 0,
    fallbacks             text[] NOT NULL DEFAULT '{}',
    input_price_per_mtok  double precision NOT NULL DEFAULT 0,
    output_price_per_mtok double precision NOT NULL DEFAULT 0,
    enabled               boolean NOT NULL DEFAULT true,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX models_vendor_idx ON models (vendor);

CREATE TABLE usage_events (
    id            bigserial PRIMARY KEY,
    time          timestamptz NOT NULL,
    request_id    text NOT NULL DEFAULT '',
    tenant_id     text NOT NULL DEFAULT '',
    key_id        text NOT NULL DEFAULT '',
    model         text NOT NULL DEFAULT '',
    target        text NOT NULL DEFAULT '',
    input_tokens  bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    estimated     boolean NOT NULL DEFAULT false,
    cost_usd      double precision NOT NULL DEFAULT 0,
    fallback_path text[] NOT NULL DEFAULT '{}',
    ttft_ms       double precision NOT NULL DEFAULT 0,
    tps           double precision NOT NULL DEFAULT 0,
    status        integer NOT NULL DEFAULT 0,
    error_code    text NOT NULL DEFAULT '',
    attributes    jsonb NOT NULL DEFAULT '{}',
    duration_ms   double precision NOT NULL DEFAULT 0
);

CREATE INDEX usage_events_tenant_time_idx ON usage_events (tenant_id, time);
CREATE INDEX usage_events_time_idx ON usage_events (time);

-- before_json is NULL when nothing existed before the change, after_json
-- when the change deleted the entity.
CREATE TABLE audit_log (
    id           bigserial PRIMARY KEY,
    time         timestamptz NOT NULL DEFAULT now(),
    actor_key_id text NOT NULL DEFAULT '',
    action       text NOT NULL,
    entity       text NOT NULL,
    before_json  jsonb,
    after_json   jsonb
);

CREATE INDEX audit_log_time_idx ON audit_log (time);

-- One row, bumped by every admin write; its row lock also orders the
-- notifications replicas follow.
CREATE TABLE config_version (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version   bigint NOT NULL DEFAULT 0
);

INSERT INTO config_version (singleton, version) VALUES (true, 0);
