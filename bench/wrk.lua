-- wrk script for `python -m bench`: POST the review in $BENCH_BODY; with $BENCH_DELAY_MS, pace each
-- connection (one request per that many ms, dithered to sub-millisecond mean); print one JSON line at the end.
local body_path = os.getenv("BENCH_BODY")
local pace = tonumber(os.getenv("BENCH_DELAY_MS") or "")

function init(args)
  local file = assert(io.open(body_path, "rb"))
  wrk.method = "POST"
  wrk.body = file:read("*a")
  wrk.headers["Content-Type"] = "application/json"
  file:close()
end

if pace and pace > 0 then
  function delay()
    local whole = math.floor(pace)
    if math.random() < pace - whole then
      return whole + 1
    end
    return whole
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"errors":%d,"status_errors":%d,' ..
    '"p50_us":%d,"p95_us":%d,"p99_us":%d,"mean_us":%.1f,"max_us":%d}\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(95), latency:percentile(99), latency.mean, latency.max))
end
