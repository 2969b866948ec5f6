-- wrk script: POST an MCP tools/call on an initialized session (2025) or as a
-- stateless 2026-07-28 request, and count every reply that is not a success. A
-- benchmark that silently measures error pages is worthless, so run.sh fails
-- the run when the counts are not zero.
--
-- Environment:
--   MCP_ERA               "2025" (default): the call of an initialized session;
--                         "2026": a stateless 2026-07-28 request: no session,
--                         headers Mcp-Method and Mcp-Name, the body's
--                         params._meta carrying the protocol version and client
--                         capabilities, and a reply only counts as a success
--                         with "resultType":"complete" in it
--   MCP_SESSION_ID        Mcp-Session-Id from initialize (omitted when empty)
--   MCP_PROTOCOL_VERSION  MCP-Protocol-Version header (default 2025-06-18;
--                         2026-07-28 with MCP_ERA=2026, also put in _meta)
--   BENCH_IDS             "unique" (default): every request gets its own id,
--                         as MCP requires within a session;
--                         "fixed": every request uses id 7 (cheaper for wrk,
--                         but concurrent duplicate ids in one session are a
--                         protocol violation a gateway may reject)
--
-- done() prints one machine-readable line:
--   BENCH_RESULT requests=.. duration_us=.. rps=.. p50_us=.. p99_us=.. ...

local threads = {}

function setup(thread)
   thread:set("tid", #threads)
   table.insert(threads, thread)
end

local body_pre = '{"jsonrpc":"2.0","id":'
local body_post = ',"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}'
local modern = os.getenv("MCP_ERA") == "2026"
local version = os.getenv("MCP_PROTOCOL_VERSION") or (modern and "2026-07-28" or "2025-06-18")
-- What a reply must hold to count as a success.
local success = '"result"'
if modern then
   body_post = ',"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},' ..
      '"_meta":{"io.modelcontextprotocol/protocolVersion":"' .. version .. '",' ..
      '"io.modelcontextprotocol/clientCapabilities":{}}}}'
   success = '"resultType":"complete"'
end

function init(args)
   responses = 0
   non200 = 0
   badbody = 0
   first_bad = ""

   wrk.method = "POST"
   wrk.path = "/mcp"
   wrk.headers["Content-Type"] = "application/json"
   wrk.headers["Accept"] = "application/json, text/event-stream"
   wrk.headers["MCP-Protocol-Version"] = version
   if modern then
      wrk.headers["Mcp-Method"] = "tools/call"
      wrk.headers["Mcp-Name"] = "echo"
   end
   local sid = os.getenv("MCP_SESSION_ID")
   if sid and sid ~= "" and not modern then
      wrk.headers["Mcp-Session-Id"] = sid
   end
   wrk.body = body_pre .. "7" .. body_post

   unique_ids = (os.getenv("BENCH_IDS") or "unique") == "unique"
   fixed_req = wrk.format()
   -- Ids are disjoint across wrk threads: thread t uses t+1000+k*1000.
   next_id = (tid or 0) + 1000
end

-- Defined at top level: wrk decides "static or dynamic request" on its main
-- Lua state before any thread's init() runs.
function request()
   if not unique_ids then
      return fixed_req or wrk.format()
   end
   next_id = next_id + 1000
   return wrk.format(nil, nil, nil, body_pre .. next_id .. body_post)
end

function response(status, headers, body)
   responses = responses + 1
   if status ~= 200 then
      non200 = non200 + 1
      if first_bad == "" then first_bad = status .. " " .. string.sub(body or "", 1, 200) end
   elseif not body or not string.find(body, success, 1, true) then
      -- A JSON-RPC error (policy deny, upstream down) comes back as HTTP 200.
      badbody = badbody + 1
      if first_bad == "" then first_bad = status .. " " .. string.sub(body or "", 1, 200) end
   end
end

function done(summary, latency, requests)
   local n200, nbad, nresp, sample = 0, 0, 0, ""
   for _, t in ipairs(threads) do
      n200 = n200 + t:get("non200")
      nbad = nbad + t:get("badbody")
      nresp = nresp + t:get("responses")
      local fb = t:get("first_bad")
      if sample == "" and fb and fb ~= "" then sample = fb end
   end
   local e = summary.errors
   local secs = summary.duration / 1e6
   io.write(string.format(
      "BENCH_RESULT requests=%d duration_us=%d rps=%.1f p50_us=%d p90_us=%d p99_us=%d max_us=%d " ..
      "responses=%d non200=%d badbody=%d connect=%d read=%d write=%d timeout=%d\n",
      summary.requests, summary.duration, summary.requests / secs,
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
      nresp, n200, nbad, e.connect, e.read, e.write, e.timeout))
   if sample ~= "" then
      io.write("BENCH_FIRST_BAD " .. string.gsub(sample, "[\r\n]", " ") .. "\n")
   end
end
