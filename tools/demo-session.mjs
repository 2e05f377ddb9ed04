#!/usr/bin/env node
// demo-session.mjs - the README's main job: drive a short scripted session through drun-mcp.
//
//   node tools/demo-session.mjs --db /tmp/demo.db [--bin build/drun-mcp]
//
// Dependency-free (child_process + readline): starts drun-mcp on the given DB, does the
// MCP handshake, lists the tools, calls get_system_instructions and get_config, prints
// one short line per step and exits 0. Afterwards the audit log shows every call:
//
//   sqlite3 /tmp/demo.db "select time, tool, outcome, summary from audit_log"
//
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const opt = (name) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : undefined;
};
const db = opt('--db');
const bin = resolve(opt('--bin') || join(here, '..', 'build', 'drun-mcp'));
if (!db) {
  console.error('usage: node tools/demo-session.mjs --db PATH [--bin PATH/TO/drun-mcp]');
  process.exit(2);
}

const server = spawn(bin, ['--db', db], { stdio: ['pipe', 'pipe', 'inherit'] });
server.on('error', (e) => {
  console.error(`cannot start '${bin}': ${e.message}; run 'make' first`);
  process.exit(1);
});
const pending = new Map();
createInterface({ input: server.stdout }).on('line', (line) => {
  const m = JSON.parse(line);
  if (m.id !== undefined && pending.has(m.id)) {
    pending.get(m.id)(m);
    pending.delete(m.id);
  }
});
let nextId = 1;
function request(method, params = {}) {
  const id = nextId++;
  server.stdin.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n');
  return new Promise((res, rej) => {
    pending.set(id, (m) => (m.error ? rej(new Error(`${method}: ${m.error.message}`)) : res(m.result)));
  });
}
async function call(name, a = {}) {
  const r = await request('tools/call', { name, arguments: a });
  if (r.isError) throw new Error(`${name} failed: ${r.content[0].text}`);
  return r;
}

try {
  const init = await request('initialize', {
    protocolVersion: '2025-11-25',
    capabilities: {},
    clientInfo: { name: 'drun-demo', version: '1.0' },
  });
  server.stdin.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) + '\n');
  console.log(`connected to ${init.serverInfo.name} ${init.serverInfo.version} (protocol ${init.protocolVersion})`);

  const { tools } = await request('tools/list');
  console.log(`${tools.length} tools: ${tools.map((t) => t.name).join(', ')}`);

  const guide = (await call('get_system_instructions')).content[0].text;
  console.log(`get_system_instructions: ${guide.split('\n')[0]} (${guide.length} characters)`);

  const cfg = (await call('get_config')).structuredContent;
  console.log(`get_config: ${cfg.source}; bash_timeout_ms=${cfg.bash_timeout_ms}, max_sessions=${cfg.max_sessions}, ` +
    `fetch domains: ${cfg.domain_allowlist.join(', ') || '(none)'}`);

  const st = (await call('create_session')).structuredContent;
  console.log(`create_session: ${st.session_id}, checkpoint ${st.checkpoint_id}`);
  const w = (await call('session_write_files', {
    entries: [{ path: 'hello.py', content: 'print("hello from the sandbox")\n' }],
    description: 'write a script',
  })).structuredContent;
  console.log(`session_write_files: checkpoint ${w.checkpoint_id}, ${w.files_added_count} file added`);
  const b = (await call('session_bash', {
    command: 'sh -c "echo hello from the sandbox > out.txt"; cat out.txt; ls',
    description: 'run a command',
  })).structuredContent;
  console.log(`session_bash: exit ${b.exit_code}, checkpoint ${b.checkpoint_id}, warm=${b.warm}, ` +
    `stdout: ${JSON.stringify(b.stdout_tail)}`);
  const d = (await call('session_diff', { description: 'what the command changed' })).content[0].text;
  console.log(`session_diff:\n${d.trim().split('\n').map((l) => '  ' + l).join('\n')}`);
  const r = (await call('session_rollback', { checkpoint_id: w.checkpoint_id, description: 'undo' }))
    .structuredContent;
  console.log(`session_rollback: head is checkpoint ${r.checkpoint_id} again`);
} catch (e) {
  console.error(`demo failed: ${e.message}`);
  server.kill();
  process.exit(1);
}
server.stdin.end();
const code = await new Promise((res) => server.on('exit', (c) => res(c)));
console.log(`drun-mcp exited with ${code}; the audit log is in ${db}`);
process.exit(code === 0 ? 0 : 1);
