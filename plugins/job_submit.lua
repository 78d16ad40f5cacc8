--[[
slurm-rl job_submit plugin: fail-open deferral of new GPU jobs.

While the slurm-rl daemon is alive (its heartbeat file is fresh), every new GPU job in a
managed partition gets a short begin-time window, so the daemon can choose its order and
nodes before Slurm starts it (`scontrol update JobId=X ReqNodeList=... StartTime=now`).
A job the daemon does not act on simply starts when its window ends; if the daemon is down
(heartbeat stale or missing) nothing is deferred at all. The plugin never rejects a job.

Configuration: `job_submit_slurm_rl.conf` in the same directory as this script (the
directory of slurm.conf), `key = value` lines, `#` comments:

  heartbeat_path    = /run/slurm-rl/heartbeat   -- file whose content is the Unix time of
                                                 -- the daemon's last beat (Lua 5.1 cannot
                                                 -- stat a file, so the time is in the file)
  heartbeat_max_age = 30                         -- seconds; older beats count as stale
  window            = 10                         -- seconds of deferral for a new job
  partitions        = gpu,gpu-large              -- managed partitions ('*' = all)
  gpu_only          = yes                        -- defer only jobs that ask for GPUs

Tag: the job's admin_comment becomes `slurm-rl:deferred:<until>` (Unix time), so the daemon
knows the begin time is its own and may release it early. A job that asks for its own
future --begin is left alone (not deferred, not tagged).
--]]

local CONF_NAME = "job_submit_slurm_rl.conf"
local TAG = "slurm-rl:deferred:"

local defaults = {
   heartbeat_path = "/run/slurm-rl/heartbeat",
   heartbeat_max_age = "30",
   window = "10",
   partitions = "*",
   gpu_only = "yes",
}

-- The directory this script was loaded from (slurmctld loads it next to slurm.conf).
local function script_dir()
   local source = debug.getinfo(1, "S").source
   local dir = string.match(source, "^@(.*)/[^/]*$")
   return dir or "/etc/slurm"
end

local function trim(s)
   return (string.gsub(s, "^%s*(.-)%s*$", "%1"))
end

-- Read the config on every submission: it is a few lines, and the daemon may rewrite it.
local function read_conf()
   local conf = {}
   for k, v in pairs(defaults) do conf[k] = v end
   local f = io.open(script_dir() .. "/" .. CONF_NAME, "r")
   if f == nil then return conf end
   for line in f:lines() do
      local body = trim(string.gsub(line, "#.*$", ""))
      local key, value = string.match(body, "^([%w_]+)%s*=%s*(.-)$")
      if key ~= nil then conf[key] = value end
   end
   f:close()
   return conf
end

-- Fresh when the file holds a Unix time no older than max_age (and not from the future).
local function heartbeat_fresh(conf, now)
   local f = io.open(conf.heartbeat_path, "r")
   if f == nil then return false end
   local text = f:read("*l")
   f:close()
   local beat = tonumber(text and trim(text) or "")
   local max_age = tonumber(conf.heartbeat_max_age) or 30
   if beat == nil then return false end
   return beat <= now + 5 and now - beat <= max_age
end

local function default_partition(part_list)
   for name, part in pairs(part_list) do
      if part.flag_default == 1 then return part.name or name end
   end
   return nil
end

local function is_managed(conf, job_desc, part_list)
   if conf.partitions == "*" then return true end
   local requested = job_desc.partition or default_partition(part_list)
   if requested == nil then return false end
   -- A job may list several partitions; it is managed when any of them is.
   for want in string.gmatch(conf.partitions, "[^,%s]+") do
      for got in string.gmatch(requested, "[^,]+") do
         if want == got then return true end
      end
   end
   return false
end

local GPU_FIELDS = { "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket" }

local function asks_for_gpus(job_desc)
   -- Index by name: a table literal of possibly-nil fields would stop ipairs early.
   for _, field in ipairs(GPU_FIELDS) do
      local value = job_desc[field]
      if value ~= nil and string.find(value, "gpu", 1, true) then return true end
   end
   return false
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   -- Fail open: any error inside the decision leaves the job untouched.
   local ok, err = pcall(function()
      local conf = read_conf()
      local now = os.time()
      if not heartbeat_fresh(conf, now) then return end
      if not is_managed(conf, job_desc, part_list) then return end
      if conf.gpu_only ~= "no" and not asks_for_gpus(job_desc) then return end
      -- A job with its own future --begin is the user's to time: never tag or move it.
      local user_begin = job_desc.begin_time
      if user_begin ~= nil and user_begin > now then return end
      local until_time = now + (tonumber(conf.window) or 10)
      job_desc.begin_time = until_time
      job_desc.admin_comment = TAG .. tostring(until_time)
   end)
   if not ok then
      slurm.log_error("slurm-rl job_submit: left job untouched after error: %s", tostring(err))
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end

slurm.log_info("slurm-rl job_submit.lua loaded")
