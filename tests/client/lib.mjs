// lib.mjs - helpers shared by the client tests: result lines, paths, temp dirs, a raw
// stdio driver for drun-mcp, the JSON-RPC line check and sqlite3 queries.
//
// Timeouts here are hang guards only (a test that waits forever fails with a reason),
// generous enough for a loaded 2-core machine running the ASan build; no test asserts on
// speed. Tests wait for conditions with waitFor, never for a fixed time.
import { spawn, execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
// For startDaemon and runColdAndWarm, at the end of the file.
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';

const here = dirname(fileURLToPath(import.meta.url));
export const BUILD = resolve(process.env.DRUN_BUILD || join(here, '..', '..', 'build'));
export const MCP = join(BUILD, 'drun-mcp');
export const MCP_TESTING = join(BUILD, 'tests', 'drun-mcp-testing');
export const HANG_MS = 120000;

// Polls cond() (sync or async) every 20 ms until it is true; throws naming `what` after
// ms (a hang guard: on a busy machine the wait is long, never a failure).
export async function waitFor(cond, what, ms = HANG_MS) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`still waiting after ${ms} ms for ${what}`);
    await new Promise((res) => setTimeout(res, 20));
  }
}

export class Results {
  constructor() {
    this.passed = 0;
    this.failed = 0;
  }
  ok(name) {
    this.passed++;
    console.log(`ok ${name}`);
  }
  fail(name, why) {
    this.failed++;
    console.log(`FAIL ${name}: ${why}`);
  }
  check(name, cond, why) {
    if (cond) this.ok(name);
    else this.fail(name, why);
    return cond;
  }
  // Runs fn; a throw is a failure with its message.
  async run(name, fn) {
    try {
      await fn();
      this.ok(name);
    } catch (e) {
      this.fail(name, (e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : String(e)));
    }
  }
  done() {
    console.log(`${this.passed} passed, ${this.failed} failed`);
    process.exit(this.failed === 0 ? 0 : 1);
  }
}

export function assert(cond, why) {
  if (!cond) throw new Error(why);
}

export function assertEq(a, b, what) {
  const ja = JSON.stringify(a), jb = JSON.stringify(b);
  if (ja !== jb) throw new Error(`${what}: got ${ja}, want ${jb}`);
}

export function makeTmp() {
  const dir = mkdtempSync(join(process.env.TMPDIR || tmpdir(), 'drun-client-'));
  // Searchable by others: a root daemon's sandboxes run as an unprivileged host user
  // (65534), which must pass through to workspaces made below it.
  chmodSync(dir, 0o711);
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export function requireBinaries(results) {
  for (const b of [MCP, MCP_TESTING]) {
    if (!existsSync(b)) {
      results.fail('binaries', `'${b}' is missing; run 'make' first`);
      results.done();
    }
  }
}

// Returns null if `line` is one valid JSON-RPC 2.0 message, else why it is not.
export function jsonRpcLineProblem(line) {
  let m;
  try {
    m = JSON.parse(line);
  } catch (e) {
    return `not JSON: ${line.slice(0, 80)}`;
  }
  if (m === null || typeof m !== 'object' || Array.isArray(m)) return 'not an object';
  if (m.jsonrpc !== '2.0') return 'jsonrpc is not "2.0"';
  const hasId = Object.hasOwn(m, 'id');
  if (typeof m.method === 'string') {
    return hasId && !(typeof m.id === 'string' || Number.isInteger(m.id)) ? 'bad request id' : null;
  }
  if (!hasId) return 'neither a response nor a request';
  if (!(m.id === null || typeof m.id === 'string' || typeof m.id === 'number')) return 'bad id';
  if (Object.hasOwn(m, 'result') === Object.hasOwn(m, 'error')) return 'needs result xor error';
  if (m.error && (!Number.isInteger(m.error.code) || typeof m.error.message !== 'string'))
    return 'bad error object';
  return null;
}

// Checks every line of a whole output text; returns a list of problems.
export function checkAllLines(text) {
  const problems = [];
  const lines = text.split('\n');
  if (lines[lines.length - 1] !== '') problems.push('output does not end with a newline');
  for (const l of lines.slice(0, -1)) {
    const p = jsonRpcLineProblem(l);
    if (p) problems.push(p);
  }
  return problems;
}

// Drives a drun-mcp process over raw bytes.
export class RawServer {
  constructor(bin, args, env = {}) {
    this.proc = spawn(bin, args, { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    this.out = '';
    this.stderr = '';
    this.messages = [];
    this.waiters = [];
    this.badLines = [];
    this.exitCode = undefined;
    this.exitPromise = new Promise((res) => {
      this.proc.on('exit', (code, signal) => {
        this.exitCode = code === null ? `signal ${signal}` : code;
        res(this.exitCode);
      });
    });
    this.proc.stdin.on('error', () => {});
    this.proc.stdout.on('data', (d) => {
      this.out += d.toString('utf8');
      let i;
      while ((i = this.out.indexOf('\n')) >= 0) {
        const line = this.out.slice(0, i);
        this.out = this.out.slice(i + 1);
        this.allOut = (this.allOut || '') + line + '\n';
        const p = jsonRpcLineProblem(line);
        if (p) this.badLines.push(p);
        let m = null;
        try {
          m = JSON.parse(line);
        } catch {}
        this.messages.push({ msg: m, line });
        this.wake();
      }
    });
    this.proc.stderr.on('data', (d) => {
      this.stderr += d.toString('utf8');
    });
  }
  wake() {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }
  write(bytes) {
    this.proc.stdin.write(bytes);
  }
  send(obj) {
    this.write(JSON.stringify(obj) + '\n');
  }
  // Waits for the next message; returns {msg, line}.
  async next(what = 'a message') {
    const deadline = Date.now() + HANG_MS;
    while (this.messages.length === 0) {
      if (this.exitCode !== undefined) throw new Error(`server exited (${this.exitCode}) while waiting for ${what}; stderr: ${this.stderr.slice(-300)}`);
      if (Date.now() > deadline) throw new Error(`no answer within ${HANG_MS} ms waiting for ${what}`);
      await new Promise((res) => {
        this.waiters.push(res);
        setTimeout(res, 200);
      });
    }
    return this.messages.shift();
  }
  async request(obj) {
    this.send(obj);
    return (await this.next(`the answer to ${obj.method}`)).msg;
  }
  async initialize() {
    const r = await this.request({ jsonrpc: '2.0', id: 'init', method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw-test', version: '9.9' } } });
    this.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    return r;
  }
  // Checks the server still answers ping correctly (the "alive and correct" probe).
  async alive(id = 'alive') {
    const r = await this.request({ jsonrpc: '2.0', id, method: 'ping' });
    assert(r && r.id === id && r.result && typeof r.result === 'object', `ping answered wrongly: ${JSON.stringify(r)}`);
  }
  endInput() {
    this.proc.stdin.end();
  }
  async exit() {
    let t;
    const guard = new Promise((res) => {
      t = setTimeout(() => res('hang'), HANG_MS);
    });
    const r = await Promise.race([this.exitPromise, guard]);
    clearTimeout(t);
    if (r === 'hang') this.proc.kill('SIGKILL');
    return r;
  }
}

// Runs a query through the sqlite3 CLI and returns the rows as objects.
export function sqlite(db, sql) {
  const out = execFileSync('sqlite3', ['-json', db, sql], { encoding: 'utf8' });
  return out.trim() === '' ? [] : JSON.parse(out);
}

// ---- a daemon behind the official SDK client ------------------------------------------

// Starts drun-mcp through the official MCP SDK client over stdio and connects it.
//   opts.config  text of a config.toml written beside the DB (omitted: no --config)
//   opts.db      the DB path (default: a fresh file in opts.dir)
//   opts.dir     a directory for the DB, the config and XDG_RUNTIME_DIR (default: a new
//                temp dir, removed at exit)
//   opts.env     extra environment; opts.args extra arguments; opts.bin another binary
//   opts.name    the client name the daemon sees; opts.timeout the hang guard per call
// Returns { client, transport, pid, db, dir, stderr(), call, ok, close }:
//   call(tool, args) -> { error } (the tool's {code,message,detail}) or { json, text }
//   ok(tool, args)   -> the parsed result; throws naming the tool on an error result
// Tools that require a description get one unless args carry their own.
const DESCRIBED = new Set(['session_write_files', 'session_bash', 'session_read_file', 'session_read_files',
  'session_delete_files', 'get_session_state', 'session_history', 'session_snapshot']);
export async function startDaemon(opts = {}) {
  const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
  const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
  const dir = opts.dir || makeTmp();
  const db = opts.db || join(dir, 'drun.db');
  const args = ['--db', db];
  if (opts.config !== undefined) {
    const cfg = join(dir, 'config.toml');
    writeFileSync(cfg, opts.config);
    args.push('--config', cfg);
  }
  const transport = new StdioClientTransport({
    command: opts.bin || MCP,
    args: [...args, ...(opts.args || [])],
    env: { ...process.env, XDG_RUNTIME_DIR: dir, ...(opts.env || {}) },
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (d) => {
    stderr += d;
    if (process.env.DRUN_TEST_STDERR) process.stderr.write(d);
  });
  const client = new Client({ name: opts.name || 'drun-client-test', version: '1.0' });
  await client.connect(transport);
  const timeout = opts.timeout || HANG_MS;
  const call = async (tool, a = {}) => {
    if (DESCRIBED.has(tool) && a.description === undefined) a = { description: 'client test', ...a };
    const r = await client.callTool({ name: tool, arguments: a }, undefined, { timeout });
    const text = r.content?.[0]?.text;
    if (r.isError) {
      try {
        return { error: JSON.parse(text) };
      } catch {
        return { error: { code: 'unparsed', message: String(text) } };
      }
    }
    try {
      return { json: JSON.parse(text), text };
    } catch {
      return { text };
    }
  };
  const ok = async (tool, a = {}) => {
    const r = await call(tool, a);
    if (r.error) throw new Error(`${tool} failed: ${JSON.stringify(r.error).slice(0, 300)}`);
    return r.json !== undefined ? r.json : r.text;
  };
  return { client, transport, pid: transport.pid, db, dir, stderr: () => stderr, call, ok, close: () => client.close() };
}

// Runs the calling test file twice, its commands cold (DRUN_SANDBOX_WARM=off) and then in
// prepared sandboxes (always), as the security suites do, unless DRUN_SANDBOX_WARM is set
// already: then it returns and the file runs once in that mode. In the parent it prints
// each run's lines tagged [off] or [always], one total, and exits (77 if both skipped).
//   await runColdAndWarm(import.meta.url);
export async function runColdAndWarm(fileUrl) {
  if (process.env.DRUN_SANDBOX_WARM) return process.env.DRUN_SANDBOX_WARM;
  const file = fileURLToPath(fileUrl);
  let passed = 0, failed = 0, skipped = 0;
  for (const mode of ['off', 'always']) {
    const r = spawnSync(process.execPath, [file], {
      env: { ...process.env, DRUN_SANDBOX_WARM: mode },
      encoding: 'utf8',
      maxBuffer: 64 << 20,
    });
    if (r.status === 77) skipped++;
    let counted = false;
    for (const line of (r.stdout || '').split('\n')) {
      const m = /^(\d+) passed, (\d+) failed$/.exec(line);
      if (m) {
        passed += Number(m[1]);
        failed += Number(m[2]);
        counted = true;
      } else if (line) console.log(line.replace(/^(ok|FAIL|skip) /, `$1 [${mode}] `));
    }
    if (r.status !== 0 && r.status !== 77 && !counted) {
      failed++;
      console.log(`FAIL [${mode}] ${file} exited ${r.status}: ${(r.stderr || '').slice(-300)}`);
    } else if (r.status !== 0 && r.status !== 77 && failed === 0) {
      failed++; // the child failed after its count line (an unhandled rejection, say)
      console.log(`FAIL [${mode}] ${file} exited ${r.status}: ${(r.stderr || '').slice(-300)}`);
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? (skipped === 2 ? 77 : 0) : 1);
}

// Exits 77 with a reason when bwrap cannot create a sandbox here.
export function requireSandbox(name) {
  try {
    execFileSync('bwrap', ['--unshare-all', '--ro-bind', '/', '/', 'true'], { stdio: 'ignore' });
  } catch {
    console.log(`skip ${name}: bwrap cannot create a sandbox here (run drun-mcp doctor)`);
    console.log('0 passed, 0 failed');
    process.exit(77);
  }
}
