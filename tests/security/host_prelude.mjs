// host_prelude.mjs - what every host-door attack script shares: a real drun-mcp over
// stdio with a config and DB in the pass directory, tool calls that parse drun's
// {code,message,detail} errors, and ok/FAIL lines host_lib.sh counts.
import { mkdirSync, writeFileSync, utimesSync } from 'node:fs';

const { RawServer } = await import(process.env.T_LIB);
export const dir = process.env.T_DIR;
export const warm = process.env.T_WARM;
let failed = 0;

export function line(ok, name, why) {
  if (!ok) failed++;
  console.log(ok ? `ok   ${name}` : `FAIL ${name}: ${why}`);
}

export async function check(name, fn) {
  try {
    const why = await fn();
    line(why === true, name, why);
  } catch (e) {
    line(false, name, String(e.stack || e.message || e).slice(0, 400));
  }
}

let stamp = 1_000_000;
// Writes the config and moves its mtime on, so the daemon's stat check sees a change.
export function writeConfig(path, text) {
  writeFileSync(path, text);
  stamp += 10;
  utimesSync(path, stamp, stamp);
}

// Starts drun-mcp. opts: config (TOML text), configPath, dbPath, env.
export async function start(opts = {}) {
  const configPath = opts.configPath || `${dir}/config.toml`;
  const dbPath = opts.dbPath || `${dir}/s.db`;
  mkdirSync(`${dir}/xdg`, { recursive: true, mode: 0o711 }); // a root daemon's sandbox user passes through
  writeConfig(configPath, opts.config || '');
  const srv = new RawServer(process.env.T_MCP, ['--db', dbPath, '--config', configPath],
    { TMPDIR: dir, XDG_RUNTIME_DIR: `${dir}/xdg`, ...(opts.env || {}) });
  let id = 0;
  async function tool(name, args) {
    const r = await srv.request({ jsonrpc: '2.0', id: ++id, method: 'tools/call', params: { name, arguments: args } });
    const res = r.result;
    if (!res) throw new Error(`${name}: ${JSON.stringify(r).slice(0, 300)}`);
    let body = res.content[0].text;
    try { body = JSON.parse(body); } catch {}
    return { isError: !!res.isError, body };
  }
  async function ok(name, args) {
    const r = await tool(name, args);
    if (r.isError) throw new Error(`${name} failed: ${JSON.stringify(r.body).slice(0, 300)}`);
    return r.body;
  }
  async function bash(sid, command) {
    return ok('session_bash', { command, description: 'attack', session_id: sid });
  }
  async function session() {
    return (await ok('create_session', {})).session_id;
  }
  async function stop() {
    await srv.alive();
    srv.endInput();
    await srv.exit();
  }
  await srv.initialize();
  return { srv, tool, ok, bash, session, stop, configPath, dbPath };
}

export function done() {
  console.log(`done ${failed}`);
}
