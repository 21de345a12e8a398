-- Arbiter's admission hold for Slurm GPU jobs (docs/slurm.md).
--
-- slurmctld runs this for every submission (JobSubmitPlugins=lua; the file
-- sits beside slurm.conf). It never calls Arbiter: it reads the policy that
-- arbiter-slurm writes (arbiter-policy.lua, beside this file), refuses what
-- Arbiter can never admit, and holds every other GPU job (priority 0: held
-- by the administrator, which its user cannot release). arbiter-slurm asks
-- Arbiter for each held job and releases it, pinned to its placement, once
-- the allocation is admitted. Jobs that ask for no GPU are not touched.

local POLICY_FILE = "arbiter-policy.lua"
local HELD_COMMENT = "arbiter: waiting for arbiter-slurm"

local function here()
  local source = debug.getinfo(1, "S").source
  return source:match("^@(.*/)") or "./"
end

-- The policy as arbiter-slurm last wrote it, or nil (then every GPU job is
-- held, and arbiter-slurm refuses what it cannot admit).
local function load_policy()
  local chunk = loadfile(here() .. POLICY_FILE)
  if chunk == nil then return nil end
  local ok, policy = pcall(chunk)
  if not ok or type(policy) ~= "table" then return nil end
  return policy
end

-- The GPU part of a TRES string ("gres:gpu:h100:2", "gres/gpu=2",
-- "gres:gpu:2,gres:nic:1"): found, type (nil when untyped), count.
local function gpu_of(tres)
  if tres == nil or tres == "" then return false end
  for item in string.gmatch(tres, "[^,]+") do
    -- "gres:gpu" alone or followed by ':' or '=' ("gres:gpumem:..." is not).
    local rest = item:match("^gres[:/]gpu$") and "" or item:match("^gres[:/]gpu[:=](.*)$")
    if rest ~= nil then
      local gpu_type, count = rest:match("^([^:=]+)[:=](%d+)$")
      if gpu_type == nil then
        gpu_type, count = nil, rest:match("^(%d*)$")
        if count == nil then gpu_type, count = rest, "1" end
      end
      return true, gpu_type, tonumber(count ~= "" and count or "1")
    end
  end
  return false
end

local function refuse(message)
  slurm.log_user("Arbiter: %s", message)
  return slurm.ERROR
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local per_node, gpu_type = gpu_of(job_desc.tres_per_node)
  local other = gpu_of(job_desc.tres_per_job) or gpu_of(job_desc.tres_per_task) or
                gpu_of(job_desc.tres_per_socket)
  if not per_node and not other then return slurm.SUCCESS end
  if other then
    return refuse("ask for GPUs per node (--gres=gpu:TYPE:N or --gpus-per-node=TYPE:N), " ..
                  "the form Arbiter places")
  end
  local policy = load_policy()
  if policy ~= nil then
    local account = job_desc.account or job_desc.default_account
    if account == nil or policy.accounts[account] == nil then
      return refuse(string.format("account '%s' is not an Arbiter team", tostring(account)))
    end
    if gpu_type ~= nil and policy.gpu_types[gpu_type] == nil then
      return refuse(string.format("GPU type '%s' is not in Arbiter's catalog (known: %s)",
                                  gpu_type, policy.known_types or ""))
    end
  end
  job_desc.priority = 0
  job_desc.comment = HELD_COMMENT
  return slurm.SUCCESS
end

-- What a held or admitted GPU job's user may not change: what Arbiter
-- decided on, and the hold itself. Operators (root, arbiter-slurm) may.
local PINNED_TEXT = { "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket",
                      "account", "partition", "req_nodes", "exc_nodes", "features",
                      "dependency", "comment" }
local PINNED_NUMBER = { "min_nodes", "max_nodes", "priority", "begin_time" }

local function given(value)
  return value ~= nil and value ~= slurm.NO_VAL and value ~= slurm.NO_VAL64
end

local function asks_gpus(desc)
  return gpu_of(desc.tres_per_node) or gpu_of(desc.tres_per_job) or
         gpu_of(desc.tres_per_task) or gpu_of(desc.tres_per_socket)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  local policy = load_policy()
  if modify_uid == 0 or (policy ~= nil and modify_uid == policy.bridge_uid) then
    return slurm.SUCCESS
  end
  if job_rec == nil then return slurm.SUCCESS end
  if not gpu_of(job_rec.tres_per_node) then
    -- A job gets GPUs at submission, where it is held; not by an update.
    if asks_gpus(job_desc) then
      return refuse("GPUs are asked for at submission (sbatch --gres=gpu:TYPE:N)")
    end
    return slurm.SUCCESS
  end
  for _, field in ipairs(PINNED_TEXT) do
    if job_desc[field] ~= nil then
      return refuse(string.format("%s of a GPU job is Arbiter's decision: cancel and submit again",
                                  field))
    end
  end
  for _, field in ipairs(PINNED_NUMBER) do
    if given(job_desc[field]) then
      return refuse(string.format("%s of a GPU job is Arbiter's decision: cancel and submit again",
                                  field))
    end
  end
  return slurm.SUCCESS
end

slurm.log_info("arbiter job_submit.lua loaded")
return slurm.SUCCESS
