// test_fetch.mjs - session_fetch through the official MCP SDK client, against the real
// build/drun-mcp, a temp DB and HTTP servers on loopback: tests/support/httpd.py on
// 127.0.0.1 and 127.0.0.2, and a small recording server of our own (to see exactly which
// headers arrived, without the credential ever being echoed into a saved file).
//
// Each case writes the config it needs (--config names a file in a temp dir; the policy
// reloads on a stat change) and checks what actually happened: the saved files, the
// checkpoint count, the audit rows (sqlite3 CLI), the headers the server received.
// Nothing here waits on a timer: slow responses are paced by the server, and the one
// time-out case uses a server that never answers.
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { BUILD, MCP, Results, assert, assertEq, makeTmp, sqlite, waitFor } from './lib.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const HTTPD = resolve(here, '..', 'support', 'httpd.py');
const R = new Results();
if (!existsSync(MCP)) {
  R.fail('binaries', `'${MCP}' is missing; run 'make' first`);
  R.done();
}

const tmp = makeTmp();
chmodSync(tmp, 0o711); // a root daemon's sandbox user must reach the gates directory
const db = join(tmp, 'fetch.db');
const cfg = join(tmp, 'config.toml');
const gates = join(tmp, 'gates');
mkdirSync(gates);
const SECRET = 'sekret-TOKEN-9c1e-do-not-leak';

// ---- servers ------------------------------------------------------------------------

function startHttpd(bind) {
  return new Promise((res, rej) => {
    const p = spawn('python3', [HTTPD, '--bind', bind], { stdio: ['pipe', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => {
      out += d;
      const m = /PORT (\d+)/.exec(out);
      if (m) res({ proc: p, port: Number(m[1]) });
    });
    p.on('exit', (c) => rej(new Error(`httpd on ${bind} exited ${c}`)));
    process.on('exit', () => p.kill('SIGKILL'));
  });
}
const h1 = await startHttpd('127.0.0.1');
const h2 = await startHttpd('127.0.0.2');
const P1 = h1.port, P2 = h2.port;

// Mixed bodies for the streaming cases: 64 KiB blocks alternately random and text-like.
const mixedCache = new Map();
function mixed(size) {
  if (!mixedCache.has(size)) {
    const b = Buffer.alloc(size);
    const line = Buffer.from('the quick brown fox jumps over the lazy dog 0123456789\n');
    for (let off = 0, i = 0; off < size; off += 65536, i++) {
      const n = Math.min(65536, size - off);
      if (i % 2 === 0) randomBytes(n).copy(b, off);
      else for (let k = 0; k < n; k++) b[off + k] = line[(k + i) % line.length];
    }
    mixedCache.set(size, { body: b, sha: createHash('sha256').update(b).digest('hex') });
  }
  return mixedCache.get(size);
}

// The recording server: remembers every request's headers; /start redirects to `to`;
// /mixed?size=N serves mixed(N) (with &stall=1: sends it, then 1 KiB every 50 ms, forever).
const seen = [];
const rec = createServer((req, res) => {
  seen.push({ url: req.url, host: req.headers.host, headers: { ...req.headers } });
  const u = new URL(req.url, 'http://x');
  if (u.pathname === '/mixed') {
    const m = mixed(Number(u.searchParams.get('size')));
    if (u.searchParams.get('stall')) {
      res.writeHead(200, { 'Content-Type': 'application/octet-stream' });
      res.write(m.body); // then a trickle that never ends: the client cancels or hits its cap
      const t = setInterval(() => res.write(Buffer.alloc(1024, 0x61)), 50);
      res.on('close', () => clearInterval(t));
    } else {
      res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': m.body.length });
      res.end(m.body);
    }
  } else if (u.pathname === '/start') {
    res.writeHead(302, { Location: u.searchParams.get('to') });
    res.end('moved');
  } else {
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    res.end('recorded');
  }
});
await new Promise((r) => rec.listen(0, '127.0.0.1', r));
const P3 = rec.address().port;

// ---- config -------------------------------------------------------------------------

let cfgAge = 0;
function writeConfig(text) {
  writeFileSync(cfg, `mount_allowlist = ["${gates}"]\n${text}\n`);
  cfgAge += 10; // the policy reloads on a stat change: move the mtime forward each time
  const t = new Date(Date.now() + cfgAge * 1000);
  utimesSync(cfg, t, t);
}
const list = (a) => `[${a.map((s) => JSON.stringify(s)).join(', ')}]`;
// Loopback allowed outright (most cases).
const OPEN = `domain_allowlist = ${list(['127.0.0.1', '127.0.0.2', 'allowed.test', 'other.test', 'cred.test'])}
fetch_allow_private = true
fetch_resolve = ${list([`allowed.test:${P1}:127.0.0.1`, `other.test:${P2}:127.0.0.2`, `other.test:${P1}:127.0.0.1`, `cred.test:${P3}:127.0.0.1`])}
[[fetch_credentials]]
domain = "cred.test"
header = "X-Api-Key"
env = "DRUN_TEST_FETCH_TOKEN"
[[fetch_credentials]]
domain = "cred.test"
header = "X-Missing"
env = "DRUN_TEST_FETCH_UNSET"
[[fetch_credentials]]
domain = "cred.test"
header = "X-Bad"
env = "DRUN_TEST_FETCH_BAD"`;
// Private addresses refused, except 127.0.0.2 by CIDR.
const STRICT = `domain_allowlist = ${list(['127.0.0.1', 'allowed.test', 'pinned.test'])}
fetch_allow_private = false
fetch_allow_cidrs = ["127.0.0.2/32"]
fetch_resolve = ${list([`allowed.test:${P2}:127.0.0.2`, `pinned.test:${P1}:127.0.0.1`])}`;
writeConfig(OPEN);

// ---- the client ---------------------------------------------------------------------

const env = { ...process.env, DRUN_TEST_FETCH_TOKEN: SECRET, DRUN_TEST_FETCH_BAD: 'v\r\nX-Injected: 1' };
delete env.DRUN_TEST_FETCH_UNSET;
const transport = new StdioClientTransport({ command: MCP, args: ['--db', db, '--config', cfg], env, stderr: 'pipe' });
let stderr = '';
transport.stderr?.on('data', (d) => (stderr += d));
const client = new Client({ name: 'drun-fetch-test', version: '1.0' });
await client.connect(transport);

const TIMEOUT = { timeout: 120000 };
async function call(name, args, opts = {}) {
  const r = await client.callTool({ name, arguments: args }, undefined, { ...TIMEOUT, ...opts });
  const text = r.content?.[0]?.text;
  let body = text;
  try {
    body = JSON.parse(text);
  } catch {}
  return { isError: !!r.isError, body, text, raw: r };
}
async function ok(name, args, opts) {
  const r = await call(name, args, opts);
  assert(!r.isError, `${name} failed: ${JSON.stringify(r.body).slice(0, 400)}`);
  return r.body;
}
async function fails(name, args, code, opts) {
  const r = await call(name, args, opts);
  assert(r.isError, `${name}: expected ${code}, got success ${r.text.slice(0, 300)}`);
  assertEq(r.body.code, code, `${name} code (message: ${r.body.message})`);
  const m = r.body.message;
  assert(typeof m === 'string' && m.length > 0 && m[0] === m[0].toLowerCase(), `message is lower-case: ${m}`);
  return r.body;
}
const fetch = (url, extra = {}, opts) => ok('session_fetch', { url, description: 'test', ...extra }, opts);
const fetchFails = (url, code, extra = {}) => fails('session_fetch', { url, description: 'test', ...extra }, code);
async function readFiles(paths, sid) {
  const r = await ok('session_read_files', { paths, description: 'r', ...(sid ? { session_id: sid } : {}) });
  const out = {};
  for (const f of r) out[f.path] = f.encoding === 'base64' ? Buffer.from(f.content, 'base64').toString('latin1') : f.content;
  return out;
}
const readFile = async (p, sid) => (await readFiles([p], sid))[p];
const histLen = async (sid) => {
  const h = await ok('session_history', { description: 'h', ...(sid ? { session_id: sid } : {}) });
  return (Array.isArray(h) ? h : h.checkpoints).length;
};
const lastRows = (tool, n) => sqlite(db, `select kind, tool, summary, outcome, error_code, args from audit_log where tool='${tool}' order by id desc limit ${n}`);
async function idle(sid) {
  let body;
  await waitFor(async () => {
    const r = await call('get_session_state', { description: 's', session_id: sid });
    if (!r.isError) body = r.body;
    else if (r.body.code !== 'session_busy') throw new Error(`get_session_state: ${JSON.stringify(r.body)}`);
    return !r.isError;
  }, `session ${sid} to be idle`);
  return body;
}

const A = (await ok('create_session', {})).session_id;
const U1 = `http://127.0.0.1:${P1}`;

// ---- plain requests -------------------------------------------------------------------

await R.run('GET: saved under downloads/<host>/<slug>/, result keys, manifest', async () => {
  const before = await histLen();
  const r = await fetch(`${U1}/plain?body=hello-world`);
  assertEq(Object.keys(r).slice(0, 9), ['status', 'bytes', 'content_type', 'saved_to', 'dir', 'manifest_path', 'assets_fetched', 'assets_skipped', 'assets_failed'], 'result keys');
  assertEq(r.status, 200, 'status');
  assertEq(r.bytes, 11, 'bytes');
  assertEq(r.content_type, 'text/plain', 'content type');
  assertEq(r.dir, 'downloads/127.0.0.1/plain', 'dir');
  assertEq(r.saved_to, 'downloads/127.0.0.1/plain/plain', 'saved_to');
  assertEq(r.manifest_path, 'downloads/127.0.0.1/plain/manifest.json', 'manifest_path');
  assertEq(await histLen(), before + 1, 'one checkpoint');
  const files = await readFiles([r.saved_to, r.manifest_path]);
  assertEq(files[r.saved_to], 'hello-world', 'body saved');
  const m = JSON.parse(files[r.manifest_path]);
  assertEq(m.source_url, `${U1}/plain?body=hello-world`, 'manifest source_url');
  assertEq(m.saved_to, r.saved_to, 'manifest saved_to');
  assertEq(m.totals, { fetched: 0, skipped: 0, failed: 0 }, 'manifest totals');
  const h = await ok('session_history', { description: 'h' });
  assertEq(h[h.length - 1].tool, 'session_fetch', 'checkpoint tool');
  assertEq(h[h.length - 1].description, 'test', 'checkpoint description');
  assertEq(h[h.length - 1].command, `GET ${U1}/plain?body=hello-world`, 'checkpoint command');
});

await R.run('POST with headers and body reaches the server as given', async () => {
  const r = await fetch(`${U1}/echo`, {
    method: 'post',
    headers: [{ name: 'X-Test', value: 'yes please' }, { name: 'Content-Type', value: 'application/json' }],
    body: '{"a":1}',
  });
  const t = await readFile(r.saved_to);
  assert(t.startsWith('method: POST\n'), `method upper-cased: ${t.slice(0, 40)}`);
  const row = lastRows('session_fetch', 1)[0];
  assert(row.summary.startsWith(`POST ${U1}/echo -> 200`), `call summary: ${row.summary}`);
  assert(/\nX-Test: yes please\n/.test(t), 'agent header sent');
  assert(/\nContent-Type: application\/json\n/.test(t), 'content type sent');
  assert(t.endsWith('\n\n{"a":1}'), `body sent: ${JSON.stringify(t.slice(-20))}`);
});

await R.run('4xx and 5xx responses are saved with their status', async () => {
  const r = await fetch(`${U1}/status?code=404`);
  assertEq(r.status, 404, '404');
  const r5 = await fetch(`${U1}/status?code=503`);
  assertEq(r5.status, 503, '503');
  assertEq(await readFile(r5.saved_to), '', 'empty body saved');
});

await R.run('bad method, bad header, too many headers: invalid_arguments, nothing saved', async () => {
  const before = await histLen();
  await fetchFails(`${U1}/plain`, 'invalid_arguments', { method: 'GE T' });
  await fetchFails(`${U1}/plain`, 'invalid_arguments', { headers: [{ name: 'X-A', value: 'a\r\nX-Injected: 1' }] });
  await fetchFails(`${U1}/plain`, 'invalid_arguments', { headers: [{ name: 'Bad Name', value: 'a' }] });
  const many = (n) => Array.from({ length: n }, (_, i) => ({ name: `X-H${i}`, value: String(i) }));
  await fetchFails(`${U1}/plain`, 'invalid_arguments', { headers: many(65) });
  const r = await fetch(`${U1}/echo`, { headers: many(64) });
  const t = await readFile(r.saved_to);
  assert(t.includes('X-H63: 63'), 'the 64th header was sent');
  assertEq(await histLen(), before + 1, 'only the good call made a checkpoint');
});

await R.run('unknown session, a URL that is not one: clear errors, nothing saved', async () => {
  await fetchFails(`${U1}/plain`, 'session_not_found', { session_id: 'deadbeef' });
  const e = await fetchFails('not a url', 'invalid_arguments');
  assert(e.message.includes('not a url'), `quotes the URL: ${e.message}`);
});

// ---- the allowlist and addresses --------------------------------------------------------

await R.run('file://, gopher://, dict:// and an unlisted host are fetch_denied', async () => {
  const before = await histLen();
  for (const u of ['file:///etc/passwd', `gopher://127.0.0.1:${P1}/1`, `dict://127.0.0.1:${P1}/d:x`]) {
    const e = await fetchFails(u, 'fetch_denied');
    assert(/http/.test(e.message), `names the allowed schemes: ${e.message}`);
  }
  const e = await fetchFails(`http://unlisted.test:${P1}/plain`, 'fetch_denied');
  assert(e.message.includes("drun-mcp config add-domain unlisted.test"), `names the fix: ${e.message}`);
  assertEq(await histLen(), before, 'no checkpoint');
  const rows = lastRows('session_fetch', 1);
  assertEq([rows[0].outcome, rows[0].error_code], ['denied', 'fetch_denied'], 'audited as a denial');
});

await R.run('redirect to a host not on the list: fetch_denied naming the hop, hop rows', async () => {
  const before = await histLen();
  const to = `http://evil.test:${P1}/plain`;
  const e = await fetchFails(`${U1}/redirect?to=${encodeURIComponent(to)}`, 'fetch_denied');
  assert(e.message.includes('evil.test'), `names the host: ${e.message}`);
  assert(/redirect/.test(e.message), `names the hop: ${e.message}`);
  assert(e.message.includes('drun-mcp config add-domain evil.test'), `names the fix: ${e.message}`);
  assertEq(await histLen(), before, 'no checkpoint');
  // One request was made: the hop that answered with the refused redirect says why.
  const hop = lastRows('session_fetch_hop', 1)[0];
  assertEq(hop.kind, 'event', 'hop row kind');
  assert(hop.summary.includes('/redirect') && hop.summary.includes('127.0.0.1') && hop.summary.includes('status 302'), `hop: ${hop.summary}`);
  assert(hop.summary.includes('evil.test'), `the hop row names the refused URL: ${hop.summary}`);
  assertEq([hop.outcome, hop.error_code], ['denied', 'fetch_denied'], 'hop outcome');
  const a0 = JSON.parse(hop.args);
  assertEq([a0.status, a0.address, a0.outcome], [302, '127.0.0.1', 'fetch_denied'], 'hop record');
  assert(a0.detail.includes('redirect hop 1'), `detail: ${a0.detail}`);
});

await R.run('a redirect loop stops at the redirect cap', async () => {
  const e = await fetchFails(`${U1}/loop`, 'fetch_denied');
  assert(/redirect/.test(e.message), e.message);
});

await R.run('private addresses refused: redirect to 127.0.0.1, a pinned name refused at connect', async () => {
  writeConfig(STRICT);
  try {
    const before = await histLen();
    // allowed.test is pinned to 127.0.0.2 (allowed by CIDR); its redirect goes to loopback.
    const ok2 = await fetch(`http://allowed.test:${P2}/plain?body=via-cidr`);
    assertEq(ok2.status, 200, 'the CIDR-allowed address works');
    const e = await fetchFails(`http://allowed.test:${P2}/redirect?to=${encodeURIComponent(`${U1}/plain`)}`, 'fetch_denied');
    assert(/loopback/.test(e.message), `names the address class: ${e.message}`);
    assert(/fetch_allow_cidrs|fetch_allow_private/.test(e.message), `names the fix: ${e.message}`);
    // pinned.test is on the allowlist, but fetch_resolve points it at 127.0.0.1.
    const e2 = await fetchFails(`http://pinned.test:${P1}/plain`, 'fetch_denied');
    assert(e2.message.includes('127.0.0.1'), `names the address: ${e2.message}`);
    const hop = lastRows('session_fetch_hop', 1)[0];
    assertEq([hop.outcome, hop.error_code], ['denied', 'fetch_denied'], 'the refused connect is audited');
    // A plain IP URL to loopback as well.
    await fetchFails(`${U1}/plain`, 'fetch_denied');
    assertEq(await histLen(), before + 1, 'only the allowed fetch made a checkpoint');
  } finally {
    writeConfig(OPEN);
  }
});

// ---- caps -----------------------------------------------------------------------------

const CAP = 1 << 20;
await R.run('body cap: at the cap saved, one byte past and an endless body are fetch_too_large', async () => {
  writeConfig(`${OPEN.split('\n[[')[0]}\nfetch_max_bytes = ${CAP}`);
  try {
    const before = await histLen();
    const r = await fetch(`${U1}/big?size=${CAP}`);
    assertEq(r.bytes, CAP, 'exactly the cap');
    const e = await fetchFails(`${U1}/big?size=${CAP + 1}`, 'fetch_too_large');
    assert(e.message.includes('fetch_max_bytes'), `names the key: ${e.message}`);
    assertEq(e.detail.limit_bytes, CAP, 'detail limit');
    await fetchFails(`${U1}/endless`, 'fetch_too_large');
    assertEq(await histLen(), before + 1, 'only the fetch at the cap made a checkpoint');
  } finally {
    writeConfig(OPEN);
  }
});

await R.run('a 10 GB gzip bomb stops at the decoded cap', async () => {
  writeConfig(`${OPEN.split('\n[[')[0]}\nfetch_max_bytes = ${CAP}`);
  try {
    const e = await fetchFails(`${U1}/bomb`, 'fetch_too_large');
    assert(e.message.includes('fetch_max_bytes'), e.message);
  } finally {
    writeConfig(OPEN);
  }
});

await R.run('headers forever stop at the header cap', async () => {
  const e = await fetchFails(`${U1}/headers-forever`, 'fetch_too_large');
  assert(/header/.test(e.message), e.message);
});

await R.run('a server that never answers: fetch_timeout', async () => {
  writeConfig(`${OPEN.split('\n[[')[0]}\nfetch_timeout_ms = 1500`);
  try {
    const before = await histLen();
    const e = await fetchFails(`${U1}/never`, 'fetch_timeout');
    assertEq(e.detail.timeout_ms, 1500, 'detail names the limit');
    assertEq(await histLen(), before, 'no checkpoint');
  } finally {
    writeConfig(OPEN);
  }
});

await R.run('a connection refused is fetch_connect_failed', async () => {
  // A port nobody listens on: the recording server's port, closed, on 127.0.0.2.
  await fetchFails(`http://127.0.0.2:${P3}/x`, 'fetch_connect_failed');
});

await R.run('the workspace size limit applies to the saved files', async () => {
  writeConfig(`${OPEN.split('\n[[')[0]}\nmax_workspace_mb = 1\nfetch_max_bytes = ${3 * CAP}`);
  try {
    const before = await histLen();
    const nBlobs = () => sqlite(db, 'select count(*) as n from blobs')[0].n;
    const blobs = nBlobs();
    const e = await fetchFails(`${U1}/big?size=${2 * CAP}`, 'workspace_size_exceeded');
    assert(e.detail && e.detail.limit_bytes === CAP, `detail: ${JSON.stringify(e.detail)}`);
    assertEq(await histLen(), before, 'no checkpoint');
    assertEq(nBlobs(), blobs, 'the streamed body was not stored either');
  } finally {
    writeConfig(OPEN);
  }
});

// ---- HTML assets ----------------------------------------------------------------------

await R.run('HTML page: assets on allowed, disallowed and redirecting hosts in manifest.json', async () => {
  const css = `${U1}/plain?body=cssbody&type=text/css`;
  const icon = `http://blocked.test:${P1}/favicon.ico`;
  const js = `http://other.test:${P1}/redirect?to=${encodeURIComponent(`http://blocked.test:${P1}/app.js`)}`;
  const img = `${U1}/status?code=404`;
  const img2 = `http://other.test:${P2}/plain?body=PNG&type=image/png`;
  const page = `${U1}/html?assets=${encodeURIComponent([css, icon, js, img, img2].join(','))}`;
  const r = await fetch(page);
  assertEq(r.content_type, 'text/html; charset=utf-8', 'content type');
  assertEq([r.assets_fetched, r.assets_skipped, r.assets_failed], [2, 1, 2], 'asset counts');
  const files = await readFiles([r.saved_to, r.manifest_path]);
  assert(files[r.saved_to].includes('<link rel="stylesheet"'), 'page saved');
  const m = JSON.parse(files[r.manifest_path]);
  assertEq(m.totals, { fetched: 2, skipped: 1, failed: 2 }, 'totals');
  assertEq(m.assets.map((a) => a.url), [css, img2], 'fetched urls');
  assertEq(m.assets[0].saved_to, `${r.dir}/plain`, 'first asset file');
  assertEq(m.assets[1].saved_to, `${r.dir}/plain-2`, 'second asset de-conflicted');
  assertEq(m.assets[1].status, 200, 'asset status');
  assertEq(m.skipped, [{ url: icon, reason: 'domain_not_allowed' }], 'skipped');
  assertEq(m.failed.length, 2, 'failed');
  const fjs = m.failed.find((f) => f.url === js);
  assert(fjs && /blocked\.test/.test(fjs.reason), `redirecting asset refused: ${JSON.stringify(m.failed)}`);
  const f404 = m.failed.find((f) => f.url === img);
  assertEq(f404 && f404.reason, 'http_404', '404 asset');
  const assets = await readFiles([`${r.dir}/plain`, `${r.dir}/plain-2`]);
  assertEq(assets[`${r.dir}/plain`], 'cssbody', 'css saved');
  assertEq(assets[`${r.dir}/plain-2`], 'PNG', 'image saved');
  const hops = sqlite(db, "select summary from audit_log where tool='session_fetch_hop' and summary like 'asset %' order by id desc limit 10");
  assert(hops.length >= 4, `asset hops audited: ${hops.length}`);
});

// ---- credentials ----------------------------------------------------------------------

await R.run('credential: sent to its host only, never after a redirect off it, never shown', async () => {
  seen.length = 0;
  const to = `http://other.test:${P1}/echo`;
  const r = await fetch(`http://cred.test:${P3}/start?to=${encodeURIComponent(to)}`, {
    headers: [{ name: 'X-Api-Key', value: 'agent-tries-to-override' }, { name: 'X-Agent', value: 'a1' }],
  });
  // The allowed host received the operator's value, once, and not the agent's.
  assertEq(seen.length, 1, 'one request to the credentialed host');
  assertEq(seen[0].headers['x-api-key'], SECRET, 'credential present on its host');
  assertEq(seen[0].headers['x-agent'], 'a1', 'agent header sent');
  assert(!('x-missing' in seen[0].headers), 'an unset variable sends no header at all');
  assert(!('x-bad' in seen[0].headers) && !('x-injected' in seen[0].headers), 'a value with a line break is not sent');
  assert(/DRUN_TEST_FETCH_BAD/.test(stderr), 'the bad value is logged by variable name');
  assertEq(stderr.split("'DRUN_TEST_FETCH_UNSET' is not set").length - 1, 1, 'logged once, not on every call');
  assert(/DRUN_TEST_FETCH_UNSET/.test(stderr) && !stderr.includes(SECRET), 'the missing variable is logged, the value never');
  // The redirect target (another host) saw no credential.
  const echo = await readFile(r.saved_to);
  assert(echo.includes('X-Api-Key: agent-tries-to-override'), 'the agent header is its own off the host');
  assert(!echo.includes(SECRET), 'credential absent after the redirect');
  assert(!/X-Missing/i.test(echo), 'no empty header');
  // Nowhere in what the agent sees or the operator's log keeps.
  assert(!JSON.stringify(r).includes(SECRET), 'not in the result');
  const m = await readFile(r.manifest_path);
  assert(!m.includes(SECRET), 'not in the manifest');
  const rows = sqlite(db, 'select * from audit_log');
  assert(!JSON.stringify(rows).includes(SECRET), 'not in any audit row');
  const hops = lastRows('session_fetch_hop', 2).reverse();
  assertEq(JSON.parse(hops[0].args).credential_sent, true, 'first hop flagged as credentialed');
  assertEq(JSON.parse(hops[1].args).credential_sent, false, 'second hop not');
  for (const f of [db, `${db}-wal`]) {
    if (existsSync(f)) assert(!readFileSync(f).includes(Buffer.from(SECRET)), `not in ${f}`);
  }
});

await R.run('credential: an agent header of the same name on another host is its own', async () => {
  const r = await fetch(`http://other.test:${P1}/echo`, { headers: [{ name: 'X-Api-Key', value: 'mine' }] });
  const t = await readFile(r.saved_to);
  assert(t.includes('X-Api-Key: mine') && !t.includes(SECRET), 'agent value sent, no credential');
});

await R.run('credential for *.example.test: its subdomains only, never after leaving them, never shown', async () => {
  const pins = ['a.example.test', 'b.example.test', 'example.test', 'other.test'].map((h) => `${h}:${P3}:127.0.0.1`);
  writeConfig(`domain_allowlist = ${list(['*.example.test', 'example.test', 'other.test'])}
fetch_allow_private = true
fetch_resolve = ${list(pins)}
[[fetch_credentials]]
domain = "*.Example.Test."
header = "X-Wild"
env = "DRUN_TEST_FETCH_TOKEN"`);
  try {
    const via = (to) => `/start?to=${encodeURIComponent(to)}`;
    // A subdomain (case-folded, trailing dot) gets it; the agent cannot replace it.
    seen.length = 0;
    const r1 = await fetch(`http://A.Example.TEST:${P3}/x`, { headers: [{ name: 'X-Wild', value: 'agent-value' }] });
    assertEq(seen.length, 1, 'one request');
    assertEq(seen[0].headers['x-wild'], SECRET, 'credential on a.example.test, the agent value dropped');
    // The apex is not a subdomain.
    seen.length = 0;
    await fetch(`http://example.test:${P3}/x`);
    assert(!('x-wild' in seen[0].headers), 'no credential on example.test itself');
    // a.example.test -> other.test -> b.example.test: sent on the first hop only.
    seen.length = 0;
    const r2 = await fetch(`http://a.example.test:${P3}${via(`http://other.test:${P3}${via(`http://b.example.test:${P3}/end`)}`)}`);
    assertEq(seen.map((x) => x.host.split(':')[0]), ['a.example.test', 'other.test', 'b.example.test'], 'the chain');
    assertEq(seen[0].headers['x-wild'], SECRET, 'sent on a.example.test');
    assert(!('x-wild' in seen[1].headers), 'absent after the redirect to other.test');
    assert(!('x-wild' in seen[2].headers), 'absent when the chain comes back: it left the domain');
    const hops = lastRows('session_fetch_hop', 3).reverse().map((h) => JSON.parse(h.args).credential_sent);
    assertEq(hops, [true, false, false], 'hop rows flag only the first');
    for (const r of [r1, r2]) {
      assert(!JSON.stringify(r).includes(SECRET), 'not in the result');
      const f = await readFiles([r.saved_to, r.manifest_path]);
      assert(!JSON.stringify(f).includes(SECRET), 'not in the saved files');
    }
    assert(!JSON.stringify(sqlite(db, 'select * from audit_log')).includes(SECRET), 'not in any audit row');
  } finally {
    writeConfig(OPEN);
  }
});

// ---- streaming into the store ----------------------------------------------------------------

let haveBwrap = true;
try {
  execFileSync('bwrap', ['--unshare-all', '--ro-bind', '/', '/', 'true'], { stdio: 'ignore' });
} catch {
  haveBwrap = false;
}

const MCP_PID = transport.pid;
const blobCount = () => sqlite(db, 'select count(*) as n from blobs')[0].n;
// Temporary blob files the daemon holds open (unlinked: they show as "(deleted)").
function tmpFds() {
  if (!MCP_PID) return [];
  const dir = `/proc/${MCP_PID}/fd`;
  return readdirSync(dir)
    .map((fd) => {
      try {
        return readlinkSync(join(dir, fd));
      } catch {
        return '';
      }
    })
    .filter((l) => l.includes('(deleted)') && l.startsWith(tmp));
}
const EXT = join(BUILD, 'drun-sqlite');
// An ASan build's extension needs the ASan runtime first in the plain sqlite3 CLI.
const ASAN_RT = (() => {
  const m = spawnSync('ldd', [`${EXT}.so`], { encoding: 'utf8' }).stdout?.match(/libasan\S* => (\S+)/);
  return m ? m[1] : '';
})();
// The sqlite3 CLI with the drun-sqlite extension loaded (drun_blob, drun_manifest).
function sqliteExt(sql) {
  const out = execFileSync('sqlite3', ['-json', '-cmd', `.load ${EXT}`, db, sql], {
    encoding: 'utf8', env: { ...process.env, LD_PRELOAD: ASAN_RT },
  });
  return out.trim() === '' ? [] : JSON.parse(out);
}

await R.run('a body of several chunks is stored streamed, byte for byte', async () => {
  const size = 6 * 1048576 + 12345;
  const m = mixed(size);
  writeConfig(`${OPEN.split('\n[[')[0].replace('cred.test"]', 'cred.test", "big.test"]').replace('fetch_resolve = [', `fetch_resolve = ["big.test:${P3}:127.0.0.1", `)}`);
  try {
    const r = await fetch(`http://big.test:${P3}/mixed?size=${size}`);
    assertEq(r.bytes, size, 'bytes');
    // The manifest of the new head names the served bytes' SHA-256 ...
    const ent = sqliteExt(`select hash as h, size from drun_manifest((select manifest_hash from checkpoints where session_id = '${A}' order by id desc limit 1)) where path = '${r.saved_to}'`);
    assertEq(ent.length, 1, 'the file is in the checkpoint');
    assertEq([ent[0].h.toLowerCase(), ent[0].size], [m.sha, size], 'manifest hash and size');
    // ... and the stored blob reads back through the store's checks (hash verified).
    const got = sqliteExt(`select length(drun_blob(hash)) as n, codec from blobs where hex(hash) = upper('${m.sha}')`);
    assertEq([got[0].n, got[0].codec], [size, 1], 'blob reads back whole, one zstd frame');
    assertEq(tmpFds(), [], 'no temporary file left open');
    if (haveBwrap) {
      const b = await ok('session_bash', { command: `sha256sum '${r.saved_to}'`, description: 'sum' });
      const out = typeof b === 'string' ? b : JSON.stringify(b);
      assert(out.includes(m.sha), `the workspace file has the served bytes: ${out.slice(0, 300)}`);
    }
  } finally {
    writeConfig(OPEN);
  }
});

await R.run('cancellation mid-stream stores nothing: no checkpoint, no blob, no temporary file', async () => {
  writeConfig(`${OPEN.split('\n[[')[0].replace('cred.test"]', 'cred.test", "big.test"]').replace('fetch_resolve = [', `fetch_resolve = ["big.test:${P3}:127.0.0.1", `)}`);
  try {
    const before = await histLen();
    const blobs = blobCount();
    const ac = new AbortController();
    let rejected = null;
    let sawFd = false;
    await call('session_fetch', { url: `http://big.test:${P3}/mixed?size=${3 << 20}&stall=1`, description: 'c' }, {
      signal: ac.signal,
      onprogress: (p) => {
        if (p.progress > 2 << 20) {
          sawFd = sawFd || tmpFds().length > 0;
          ac.abort('test');
        }
      },
    }).catch((e) => (rejected = e));
    assert(rejected !== null, 'the call was rejected by the abort');
    await idle(A);
    assertEq(await histLen(), before, 'no checkpoint');
    assertEq(blobCount(), blobs, 'no blob row');
    if (MCP_PID) assert(sawFd, 'the body was streaming to a temporary file');
    assertEq(tmpFds(), [], 'the temporary file is gone');
  } finally {
    writeConfig(OPEN);
  }
});

await R.run('a cap hit mid-stream stores nothing', async () => {
  writeConfig(`${OPEN.split('\n[[')[0].replace('cred.test"]', 'cred.test", "big.test"]').replace('fetch_resolve = [', `fetch_resolve = ["big.test:${P3}:127.0.0.1", `)}\nfetch_max_bytes = ${(2 << 20) + 1}`);
  try {
    const before = await histLen();
    const blobs = blobCount();
    const e = await fetchFails(`http://big.test:${P3}/mixed?size=${5 << 20}`, 'fetch_too_large');
    assert(e.message.includes('fetch_max_bytes'), e.message);
    const e2 = await fetchFails(`http://big.test:${P3}/mixed?size=${3 << 20}&stall=1`, 'fetch_too_large');
    assert(e2.message.includes('fetch_max_bytes'), e2.message);
    assertEq(await histLen(), before, 'no checkpoint');
    assertEq(blobCount(), blobs, 'no blob row');
    assertEq(tmpFds(), [], 'no temporary file left');
  } finally {
    writeConfig(OPEN);
  }
});

// ---- progress, cancellation, concurrency ------------------------------------------------

await R.run('progress notifications report bytes received, increasing', async () => {
  const got = [];
  const r = await fetch(`${U1}/slow?chunks=4&delay=50`, {}, { onprogress: (p) => got.push(p) });
  assertEq(r.bytes, 4096, 'bytes');
  assert(got.length >= 1, 'at least one notification');
  for (let i = 1; i < got.length; i++) assert(got[i].progress > got[i - 1].progress, 'strictly increasing');
  assert(got.every((p) => p.progress <= 4096 && /bytes received/.test(p.message)), JSON.stringify(got));
});

await R.run('cancellation mid-download: no checkpoint, audited cancelled, session usable', async () => {
  const before = await histLen();
  const ac = new AbortController();
  let rejected = null;
  await call('session_fetch', { url: `${U1}/slow?chunks=400&delay=50`, description: 'c' }, {
    signal: ac.signal,
    onprogress: () => ac.abort('test'),
  }).catch((e) => (rejected = e));
  assert(rejected !== null, 'the call was rejected by the abort');
  await idle(A);
  assertEq(await histLen(), before, 'no checkpoint');
  let row;
  try {
    await waitFor(() => (row = lastRows('session_fetch', 1)[0]) && row.outcome === 'cancelled', 'the cancelled fetch in the audit log');
  } catch {}
  assertEq(row && row.outcome, 'cancelled', 'audited as cancelled');
  const r = await fetch(`${U1}/plain?body=after`);
  assertEq(r.status, 200, 'the session works after a cancel');
});

await R.run('ten fetches in parallel on ten sessions while another session runs a call', async () => {
  const X = (await ok('create_session', {})).session_id;
  const gate = join(gates, 'open');
  let doneX = false;
  // The long call: a sandboxed command waiting for a gate, or (without bwrap) a slow fetch.
  const long = (haveBwrap
    ? ok('session_bash', { command: `while [ ! -e '${gate}' ]; do sleep 0.05; done; echo done`, description: 'wait', session_id: X })
    : fetch(`${U1}/slow?chunks=200&delay=50`, { session_id: X })).then((v) => {
    doneX = true;
    return v;
  });
  await waitFor(async () => {
    const r = await call('get_session_state', { description: 's', session_id: X });
    return r.isError && r.body.code === 'session_busy';
  }, 'session X to be busy');
  // The busy rule holds for session_fetch too.
  const busy = await call('session_fetch', { url: `${U1}/plain`, description: 'b', session_id: X });
  assert(busy.isError && busy.body.code === 'session_busy', `busy: ${busy.text}`);
  const ids = [];
  for (let i = 0; i < 10; i++) ids.push((await ok('create_session', {})).session_id);
  const rs = await Promise.all(ids.map((sid, i) => fetch(`${U1}/plain?body=parallel-${i}`, { session_id: sid })));
  for (let i = 0; i < 10; i++) {
    assertEq(rs[i].status, 200, `fetch ${i}`);
    assertEq(await readFile(rs[i].saved_to, ids[i]), `parallel-${i}`, `session ${i} got its own body`);
  }
  assert(!doneX, 'the ten fetches finished while the other call was still running');
  writeFileSync(gate, '');
  await long;
});

await client.close();
rec.close();
h1.proc.stdin.end();
h2.proc.stdin.end();
if (R.failed) console.log(`stderr tail: ${stderr.slice(-1500)}`);
R.done();
