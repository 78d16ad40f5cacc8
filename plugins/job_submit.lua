--[[
slurm-rl job_submit plugin: fail-open deferral of new GPU jobs.

While the slurm-rl daemon is alive (its heartbeat file is fresh), every new GPU job in a
managed partition gets a short begin-time window, so the daemon can choose its order and
nodes before Slurm starts it (`scontrol update JobId=X ReqNodeList=... StartTime=now`).
A job the daemon does not act on simply starts when its window ends; if the daemon is down
(heartbeat stale or missing) nothing is deferred at all. The plugin never rejects a job, and
whenever it is in doubt (an error, a file it does not trust) it leaves the job untouched.

Configuration: `job_submit_slurm_rl.conf` in the same directory as this script (the
directory of slurm.conf), `key = value` lines, `#` comments, at most 8 KiB:

  heartbeat_path    = /run/slurm-rl/heartbeat   -- file whose content is the Unix time of
                                                 -- the daemon's last beat (Lua 5.1 cannot
                                                 -- stat a file, so the time is in the file)
  heartbeat_max_age = 30                         -- seconds; older beats count as stale
  window            = 10                         -- seconds of deferral for a new job
  partitions        = gpu,gpu-large              -- managed partitions ('*' = all)
  gpu_only          = yes                        -- defer only jobs that ask for GPUs

Tag: `slurm-rl:deferred:<until>` (Unix time) is added in front of the job's admin_comment
(what was there is kept after a comma), so the daemon knows the begin time is its own and may
release it early. A job that asks for its own future --begin is left alone (not deferred,
not tagged).

Which files are read (the config and the heartbeat), and how
--------------------------------------------------------------
slurmctld runs this script inside its own process, holding its job locks, so a read that
blocks (a FIFO planted at the heartbeat path), follows a symlink somewhere else, or swallows a
huge file stalls or harms the whole controller. Slurm's Lua (5.1 in Debian 12, linked by
job_submit_lua.so) has only the standard library: `io.open` follows symlinks and blocks on a
FIFO, and nothing in it can stat a file. luaposix and LuaFileSystem are not installed with
Slurm (and Debian 12's luaposix 33.4 has neither O_NOFOLLOW nor fstat), so they cannot be
relied on. What this plugin does instead:

 * Before opening either file it lstat()s every component of the path with one run of
   coreutils' `/usr/bin/stat` (io.popen, argv single-quoted; it never opens a file, so it
   cannot block on one). Symlinks are not followed: one anywhere in the path is refused, and
   so is anything but a regular file at the end. A run costs about 3 ms and forks slurmctld,
   which holds its job locks meanwhile, so its answer is kept for STAT_TTL_S (30 s) and
   reused by the submissions in between (a burst of a thousand sbatch costs one run, not a
   thousand). In those seconds only root or the owner of the file's directory could swap
   the file (the checks below), the accounts the checks already trust.
 * Checking and then opening leaves a window in which the file could be swapped, so the
   checks also make sure that only trusted accounts can write the path at all: the file's
   directory must be writable by its owner only (not by group or others, sticky or not), and
   every directory above it must belong to root or to slurmctld's own user and be writable
   only by its owner, except a sticky directory such as /tmp, whose entry on the path must
   then belong to root or slurmctld's user (so nobody else can have made or replace it).
   The file itself must not be writable by group or others. So a FIFO, symlink or other file
   can only appear there through root or the account that owns the directory, the daemon's;
   the daemon writes the heartbeat as a regular file by atomic rename (slurm_rl.slurm
   .deferral.beat) into a directory of its own (/run/slurm-rl, packaging/slurm-rl.tmpfiles).
 * Reads are bounded: at most 8 KiB of config and 256 bytes of heartbeat (one Unix time and a
   newline); a larger file is not trusted.

A missing config means the defaults below; a config or heartbeat that fails a check means no
deferral, and the reason goes to slurmctld's log (once until it changes).
--]]

local CONF_NAME = "job_submit_slurm_rl.conf"
local TAG = "slurm-rl:deferred:"
local STAT = "/usr/bin/stat"
local MAX_CONF_BYTES = 8192
local MAX_BEAT_BYTES = 256
local MAX_PATH_BYTES = 1024
local STAT_TTL_S = 30  -- how long one stat run's answer serves (see the header); the
                       -- config's path_check_every overrides it (0: every submission)
local stat_ttl = STAT_TTL_S

local defaults = {
   heartbeat_path = "/run/slurm-rl/heartbeat",
   heartbeat_max_age = "30",
   window = "10",
   partitions = "*",
   gpu_only = "yes",
   path_check_every = "30",  -- STAT_TTL_S
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

-- Log a reason for leaving jobs alone once, not on every submission, until it changes.
local last_complaint = nil
local function complain(why)
   if why ~= last_complaint then
      last_complaint = why
      slurm.log_error("slurm-rl job_submit: not deferring new jobs: %s", why)
   end
end

------------------------------------------------------------------------------------------
-- File checks (see the header for why they are done this way)

-- Mode bits, without bit operators (Lua 5.1 has none).
local function bit_set(value, bit) return math.floor(value / bit) % 2 == 1 end
local S_IFDIR, S_IFREG = 4, 8  -- st_mode / 4096
local S_ISVTX, S_IWGRP, S_IWOTH = 512, 16, 2

local function kind_of(mode) return math.floor(mode / 4096) % 16 end
local function others_may_write(mode)
   return bit_set(mode, S_IWGRP) or bit_set(mode, S_IWOTH)
end

-- "/a/b/c" -> { "/", "/a", "/a/b", "/a/b/c" }; nil for a path that is not a plain absolute
-- one (relative, with "." or "..", or with characters that do not belong in a path here).
local function components(path)
   if type(path) ~= "string" or string.sub(path, 1, 1) ~= "/" then return nil end
   if #path > MAX_PATH_BYTES or string.find(path, "[%c']") then return nil end
   local list, prefix = { "/" }, ""
   for name in string.gmatch(path, "[^/]+") do
      if name == "." or name == ".." then return nil end
      prefix = prefix .. "/" .. name
      table.insert(list, prefix)
   end
   if #list < 2 then return nil end
   return list
end

-- lstat() of each path (not following symlinks): { [path] = { mode=, uid=, size= } } for
-- those that exist; nil when stat itself could not be run.
local function lstat_all(paths)
   local quoted, seen = {}, {}
   for _, path in ipairs(paths) do
      if not seen[path] then
         seen[path] = true
         table.insert(quoted, "'" .. path .. "'")
      end
   end
   local command = "exec " .. STAT .. " -c '%f %u %s %n' -- " .. table.concat(quoted, " ")
      .. " </dev/null 2>/dev/null"
   local pipe = io.popen(command, "r")
   if pipe == nil then return nil end
   local out = pipe:read((MAX_PATH_BYTES + 64) * #quoted) or ""
   pipe:close()
   local found = {}
   for line in string.gmatch(out, "[^\n]+") do
      local mode, uid, size, name = string.match(line, "^(%x+) (%d+) (%d+) (.+)$")
      if name ~= nil and seen[name] then
         found[name] = { mode = tonumber(mode, 16), uid = tonumber(uid), size = tonumber(size) }
      end
   end
   if found["/"] == nil then return nil end  -- "/" always exists: stat did not run
   return found
end

-- lstat_all's answer for `paths`, from an earlier run for the same paths when it is younger
-- than STAT_TTL_S (a clock that went back refreshes it). A few path sets at most are kept.
local stat_cache, cached_sets = {}, 0
local function lstat_cached(paths, now)
   local key = table.concat(paths, "\n")
   local hit = stat_cache[key]
   if hit ~= nil and now - hit.at >= 0 and now - hit.at < stat_ttl then return hit.stats end
   local stats = lstat_all(paths)
   if stats == nil then return nil end
   if hit == nil then
      cached_sets = cached_sets + 1
      if cached_sets > 8 then stat_cache, cached_sets = {}, 1 end
   end
   stat_cache[key] = { at = now, stats = stats }
   return stats
end

-- slurmctld's effective uid (the "Uid:" line of /proc/self/status: real, effective, ...).
local function own_uid()
   local f = io.open("/proc/self/status", "r")
   if f == nil then return nil end
   local uid = nil
   for _ = 1, 64 do
      local line = f:read("*l")
      if line == nil then break end
      uid = string.match(line, "^Uid:%s+%d+%s+(%d+)")
      if uid ~= nil then break end
   end
   f:close()
   return tonumber(uid)
end

-- Whether the regular file at `path` may be read: "ok", "missing", or a reason not to trust
-- it. `stats` is lstat_all's answer for components(path).
local function check_file(path, list, stats, euid)
   local function trusted_owner(uid) return uid == 0 or uid == euid end
   local n = #list
   for i = 1, n - 1 do
      local dir = stats[list[i]]
      if dir == nil then
         return stats[list[n]] == nil and "missing" or list[i] .. " cannot be checked"
      end
      if kind_of(dir.mode) ~= S_IFDIR then
         return list[i] .. " is not a directory (symlinks are not followed)"
      end
      if i == n - 1 then
         if others_may_write(dir.mode) then
            return "its directory " .. list[i] .. " is writable by others"
         end
      else
         if not trusted_owner(dir.uid) then
            return list[i] .. " belongs to uid " .. dir.uid .. ", not root or slurmctld's user"
         end
         if others_may_write(dir.mode) then
            local below = stats[list[i + 1]]
            if not bit_set(dir.mode, S_ISVTX) then
               return list[i] .. " is writable by others"
            end
            if below ~= nil and not trusted_owner(below.uid) then
               return list[i + 1] .. " in the shared directory " .. list[i]
                  .. " belongs to uid " .. below.uid .. ", not root or slurmctld's user"
            end
         end
      end
   end
   local file = stats[path]
   if file == nil then return "missing" end
   if kind_of(file.mode) ~= S_IFREG then
      return "not a regular file (symlinks are not followed)"
   end
   if others_may_write(file.mode) then return "writable by others" end
   return "ok"
end

-- The content of a checked file, at most `limit` bytes: text, or nil and the reason.
local function read_checked(path, list, stats, euid, limit)
   local verdict = check_file(path, list, stats, euid)
   if verdict ~= "ok" then return nil, verdict end
   if stats[path].size > limit then return nil, "larger than " .. limit .. " bytes" end
   local f = io.open(path, "rb")
   if f == nil then return nil, "missing" end
   local text = f:read(limit + 1) or ""
   f:close()
   if #text > limit then return nil, "larger than " .. limit .. " bytes" end
   return text, "ok"
end

------------------------------------------------------------------------------------------
-- Config and heartbeat

local function parse_conf(text)
   local conf = {}
   for k, v in pairs(defaults) do conf[k] = v end
   for line in string.gmatch(text, "[^\n]+") do
      local body = trim(string.gsub(line, "#.*$", ""))
      local key, value = string.match(body, "^([%w_]+)%s*=%s*(.-)$")
      if key ~= nil then conf[key] = value end
   end
   return conf
end

-- Fresh when the file holds a Unix time no older than max_age (and not from the future).
local function heartbeat_fresh(text, conf, now)
   local beat = tonumber(trim(string.match(text, "^[^\n]*")))
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

------------------------------------------------------------------------------------------
-- GPU requests

local GPU_FIELDS = { "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket" }
local COUNT_SUFFIX = { [""] = 1, k = 1024, m = 1024 ^ 2, g = 1024 ^ 3, t = 1024 ^ 4 }

local function count_of(text)
   local digits, suffix = string.match(text, "^(%d+)(%a?)$")
   local scale = digits and COUNT_SUFFIX[string.lower(suffix)]
   return scale and tonumber(digits) * scale or nil
end

-- The GPUs one TRES item asks for: "gres:gpu:a100:4" and "gres:gpu:2" (how 22.05 writes
-- them), "gres/gpu:a100:4", "gres/gpu=2" (later versions), a bare "gpu:4"; "gpu" or
-- "gpu:a100" without a count is one. Any other name ("gpu_lic", "license/gpu", "mps") asks
-- for none, and so does a form this does not know (in doubt, the job is not deferred).
local function gpus_in(item)
   local body = string.gsub(trim(item), "%b()$", "")  -- a socket binding such as "(S:0)"
   body = string.match(body, "^gres[:/](.*)$") or body
   body = string.gsub(body, "=", ":")
   local fields = {}
   for field in string.gmatch(body .. ":", "([^:]*):") do table.insert(fields, field) end
   if fields[1] ~= "gpu" then return 0 end
   if #fields == 1 then return 1 end
   if #fields == 2 then
      if fields[2] == "" then return 0 end
      return count_of(fields[2]) or 1  -- "gpu:4", or "gpu:a100" (one of that type)
   end
   if #fields == 3 and fields[2] ~= "" then return count_of(fields[3]) or 0 end
   return 0
end

local function asks_for_gpus(job_desc)
   -- Index by name: a table literal of possibly-nil fields would stop ipairs early.
   for _, field in ipairs(GPU_FIELDS) do
      local value = job_desc[field]
      if type(value) == "string" then
         for item in string.gmatch(value, "[^,]+") do
            if gpus_in(item) > 0 then return true end
         end
      end
   end
   return false
end

-- Our tag in front of what the admin comment held (any earlier tag of ours is dropped: the
-- daemon reads the first one, and it must be this window's).
local function tagged(comment, until_time)
   local parts = { TAG .. tostring(until_time) }
   if type(comment) == "string" and comment ~= "" then
      if string.find(comment, TAG, 1, true) == nil then
         table.insert(parts, comment)
      else
         for part in string.gmatch(comment, "[^,]+") do
            if string.find(trim(part), TAG, 1, true) ~= 1 then table.insert(parts, part) end
         end
      end
   end
   return table.concat(parts, ",")
end

------------------------------------------------------------------------------------------

-- The heartbeat path read last: stat-ed together with the config, so that one stat run
-- serves both while the config names the same heartbeat.
local last_heartbeat_path = defaults.heartbeat_path

local function decide(job_desc, part_list)
   local now = os.time()
   local conf_path = script_dir() .. "/" .. CONF_NAME
   local conf_list = components(conf_path)
   if conf_list == nil then return complain("cannot check the config path " .. conf_path) end
   local beat_guess = components(last_heartbeat_path) or {}
   local wanted = {}
   for _, p in ipairs(conf_list) do table.insert(wanted, p) end
   for _, p in ipairs(beat_guess) do table.insert(wanted, p) end
   local stats = lstat_cached(wanted, now)
   if stats == nil then return complain(STAT .. " could not be run to check files") end
   local euid = own_uid()

   local conf
   local text, why = read_checked(conf_path, conf_list, stats, euid, MAX_CONF_BYTES)
   if text ~= nil then
      conf = parse_conf(text)
   elseif why == "missing" then
      conf = parse_conf("")
   else
      return complain("config " .. conf_path .. ": " .. why)
   end

   stat_ttl = math.max(0, tonumber(conf.path_check_every) or STAT_TTL_S)
   if not is_managed(conf, job_desc, part_list) then return end
   if conf.gpu_only ~= "no" and not asks_for_gpus(job_desc) then return end
   -- A job with its own future --begin is the user's to time: never tag or move it.
   local user_begin = job_desc.begin_time
   if user_begin ~= nil and user_begin > now then return end

   local beat_path = conf.heartbeat_path
   local beat_list = components(beat_path)
   if beat_list == nil then return complain("heartbeat_path " .. tostring(beat_path)
      .. " is not a plain absolute path") end
   if beat_path ~= last_heartbeat_path then
      -- the next submissions ask for these same paths, and find them in the cache
      last_heartbeat_path = beat_path
      wanted = {}
      for _, p in ipairs(conf_list) do table.insert(wanted, p) end
      for _, p in ipairs(beat_list) do table.insert(wanted, p) end
      stats = lstat_cached(wanted, now)
      if stats == nil then return complain(STAT .. " could not be run to check files") end
   end
   local beat
   beat, why = read_checked(beat_path, beat_list, stats, euid, MAX_BEAT_BYTES)
   if beat == nil then
      -- A missing heartbeat is the daemon being down: normal, not worth a log line.
      if why ~= "missing" then complain("heartbeat " .. beat_path .. ": " .. why) end
      return
   end
   last_complaint = nil
   if not heartbeat_fresh(beat, conf, now) then return end

   local until_time = now + (tonumber(conf.window) or 10)
   local comment = tagged(job_desc.admin_comment, until_time)  -- before changing anything
   job_desc.begin_time = until_time
   job_desc.admin_comment = comment
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   -- Fail open: any error inside the decision leaves the job untouched.
   local ok, err = pcall(decide, job_desc, part_list)
   if not ok then
      slurm.log_error("slurm-rl job_submit: left job untouched after error: %s", tostring(err))
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end

slurm.log_info("slurm-rl job_submit.lua loaded")
