-- Requests made with a model profile: the profile as asked (model_parameters
-- > 0), next to the concrete shape the arbiter chose for it.
ALTER TABLE requests
  ADD COLUMN model_parameters bigint NOT NULL DEFAULT 0 CHECK (model_parameters >= 0),
  ADD COLUMN model_bytes_per_parameter_milli bigint NOT NULL DEFAULT 0,
  ADD COLUMN model_layers integer NOT NULL DEFAULT 0,
  ADD COLUMN model_kv_heads integer NOT NULL DEFAULT 0,
  ADD COLUMN model_head_dim integer NOT NULL DEFAULT 0,
  ADD COLUMN model_kv_bytes_per_element_milli bigint NOT NULL DEFAULT 0,
  ADD COLUMN model_token_budget bigint NOT NULL DEFAULT 0,
  ADD COLUMN model_overhead_mib bigint NOT NULL DEFAULT 0;
