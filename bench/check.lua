-- wrk script for the benchmark (examples/bench): POST /v1/check bodies.
--   SG_POLICY    policy name                         (default roomy)
--   SG_KEYS      keys cycled through; 0 = a fresh key per request slot
--   SG_REPEAT    requests per key before the next key (default 1)
--   SG_REQUESTS  requests per wrk thread, then stop; 0 = until -d ends
local policy = os.getenv("SG_POLICY") or "roomy"
local keys = tonumber(os.getenv("SG_KEYS") or "10000")
local repeat_each = tonumber(os.getenv("SG_REPEAT") or "1")
local limit = tonumber(os.getenv("SG_REQUESTS") or "0")
local counter = 0
local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  counter = counter + 1
  if limit > 0 and counter > limit then
    wrk.thread:stop()
  end
  local n = math.floor((counter - 1) / repeat_each)
  local key
  if keys > 0 then
    key = "k" .. (n % keys)
  else
    key = "t" .. tid .. "-" .. n
  end
  return wrk.format(nil, nil, nil, '{"key":"' .. key .. '","policy":"' .. policy .. '"}')
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRK %d %d %d %d %d %d %d\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9),
    e.status, e.connect + e.read + e.write + e.timeout))
end
