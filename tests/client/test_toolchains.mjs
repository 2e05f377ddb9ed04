// test_toolchains.mjs - the host's $PATH toolchains inside the sandbox.
//
// A fake layout in a temp dir is put first on drun-mcp's PATH, as pyenv, asdf, mise,
// volta, Linuxbrew and pipx do on real machines: a pyenv-style "shims" directory whose
// script execs an interpreter under the manager's root; a directory of links into a
// runtime's bin/ whose program reads its prefix's lib/; a pipx-style link to a venv
// script whose "#!" names the venv's interpreter. Before: each exits 127 in the sandbox.
// After: each runs, the root is named in the sandbox's environment, and what must stay
// out does (a link into the daemon's HOME does not bind HOME; /proc is never bound).
// `drun-mcp doctor` runs the same tools and names the one that fails. Cold and warm.
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { MCP, Results, assert, assertEq, makeTmp } from './lib.mjs';

if (!process.env.DRUN_SANDBOX_WARM) {
  let passed = 0, failed = 0, skipped = 0;
  for (const mode of ['off', 'always']) {
    const r = spawnSync(process.execPath, [fileURLToPath(import.meta.url)], { env: { ...process.env, DRUN_SANDBOX_WARM: mode }, encoding: 'utf8', maxBuffer: 64 << 20 });
    if (r.status === 77) skipped++;
    for (const line of (r.stdout || '').split('\n')) {
      const m = /^(\d+) passed, (\d+) failed$/.exec(line);
      if (m) {
        passed += Number(m[1]);
        failed += Number(m[2]);
      } else if (line) console.log(line.replace(/^(ok|FAIL|skip) /, `$1 [${mode}] `));
    }
    if (r.status !== 0 && r.status !== 77 && !/passed, \d+ failed/.test(r.stdout || '')) {
      failed++;
      console.log(`FAIL [${mode}] test_toolchains exited ${r.status}: ${(r.stderr || '').slice(-300)}`);
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? (skipped === 2 ? 77 : 0) : 1);
}

const R = new Results();
if (!existsSync(MCP)) {
  R.fail('binaries', `'${MCP}' is missing; run 'make' first`);
  R.done();
}
try {
  execFileSync('bwrap', ['--unshare-all', '--ro-bind', '/', '/', 'true'], { stdio: 'ignore' });
} catch (e) {
  console.log('skip test_toolchains: bwrap cannot create a sandbox here (run drun-mcp doctor)');
  console.log('0 passed, 0 failed');
  process.exit(77);
}

const tmp = makeTmp();
// a root daemon's commands run as an unprivileged host user, who must reach what is bound
chmodSync(tmp, 0o711);
const db = join(tmp, 't.db');
const home = join(tmp, 'home');
function script(path, body) {
  writeFileSync(path, `#!/bin/sh\n${body}\n`);
  chmodSync(path, 0o755);
}
mkdirSync(join(home, '.ssh'), { recursive: true });
writeFileSync(join(home, '.ssh', 'id_test'), 'PRIVATE KEY\n');
script(join(home, 'tool.sh'), 'echo home tool');

// pyenv: <root>/shims/fakepy execs <root>/versions/1.0/bin/fakepy
const pyenv = join(tmp, '.pyenv');
mkdirSync(join(pyenv, 'shims'), { recursive: true });
mkdirSync(join(pyenv, 'versions', '1.0', 'bin'), { recursive: true });
script(join(pyenv, 'versions', '1.0', 'bin', 'fakepy'), 'echo "fakepy ok $PYENV_ROOT"');
script(join(pyenv, 'shims', 'fakepy'), `exec '${join(pyenv, 'versions', '1.0', 'bin', 'fakepy')}' "$@"`);

// a runtime whose program reads its own prefix, reached through a link on PATH
const node = join(tmp, 'runtimes', 'node-v1');
mkdirSync(join(node, 'bin'), { recursive: true });
mkdirSync(join(node, 'lib'), { recursive: true });
writeFileSync(join(node, 'lib', 'version.txt'), 'node lib ok\n');
script(join(node, 'bin', 'fakenode'), `cat '${join(node, 'lib', 'version.txt')}'`);
const links = join(tmp, 'links');
mkdirSync(links);
symlinkSync(join(node, 'bin', 'fakenode'), join(links, 'fakenode'));

// pipx: a link to a venv's console script whose "#!" names the venv's interpreter
const venv = join(tmp, 'pipx', 'venvs', 'tool');
mkdirSync(join(venv, 'bin'), { recursive: true });
mkdirSync(join(tmp, 'interp', 'bin'), { recursive: true });
script(join(tmp, 'interp', 'bin', 'fakeinterp'), 'echo "interp ok"');
writeFileSync(join(venv, 'bin', 'faketool'), `#!${join(tmp, 'interp', 'bin', 'fakeinterp')}\n`);
chmodSync(join(venv, 'bin', 'faketool'), 0o755);
symlinkSync(join(venv, 'bin', 'faketool'), join(links, 'faketool'));

// what must stay out: a link to a script at the top of HOME, a link into /proc
symlinkSync(join(home, 'tool.sh'), join(links, 'hometool'));
symlinkSync('/proc/self/environ', join(links, 'environ'));

// the system's directories after ours: the test runner's own toolchains (under /root, say)
// may be out of the sandbox user's reach, which doctor rightly reports
const PATH = `${join(pyenv, 'shims')}:${links}:/usr/local/bin:/usr/bin:/bin`;
// the managers' variables of the machine running the test would name other roots
const baseEnv = { ...process.env };
for (const v of ['PYENV_ROOT', 'RBENV_ROOT', 'ASDF_DATA_DIR', 'MISE_DATA_DIR', 'VOLTA_HOME', 'HOMEBREW_PREFIX']) delete baseEnv[v];

const TIMEOUT = { timeout: 120000 };
const transport = new StdioClientTransport({
  command: MCP,
  args: ['--db', db],
  env: { ...baseEnv, HOME: home, PATH, DRUN_TEST_SECRET: 'daemon-secret' },
  stderr: 'pipe',
});
const client = new Client({ name: 'drun-toolchain-test', version: '1.0' });
await client.connect(transport);
async function bash(command) {
  const r = await client.callTool({ name: 'session_bash', arguments: { command, description: 't' } }, undefined, TIMEOUT);
  const b = JSON.parse(r.content[0].text);
  assert(!r.isError, `session_bash failed: ${r.content[0].text.slice(0, 300)}`);
  return b;
}
const out = (b) => b.stdout_tail ?? b.stdout ?? '';
await client.callTool({ name: 'create_session', arguments: {} });

await R.run('a pyenv-style shim runs the interpreter under its root', async () => {
  const b = await bash('fakepy');
  assertEq(b.exit_code, 0, `exit code (stderr: ${b.stderr_tail})`);
  assertEq(out(b), `fakepy ok ${pyenv}\n`, 'stdout (the root named as PYENV_ROOT inside)');
});

await R.run('a link on PATH into an unbound runtime runs, and its prefix is readable', async () => {
  const b = await bash('fakenode');
  assertEq(b.exit_code, 0, `exit code (stderr: ${b.stderr_tail})`);
  assertEq(out(b), 'node lib ok\n', 'stdout');
});

await R.run('a pipx-style link to a venv script runs its "#!" interpreter', async () => {
  const b = await bash('faketool');
  assertEq(b.exit_code, 0, `exit code (stderr: ${b.stderr_tail})`);
  assertEq(out(b), 'interp ok\n', 'stdout');
});

await R.run('a link into the daemon\'s HOME does not bind HOME', async () => {
  const b = await bash(`hometool; echo "rc=$?"; cat '${join(home, '.ssh', 'id_test')}' 2>&1; ls '${home}' 2>&1 | head -3`);
  assert(/rc=127/.test(out(b)), `hometool ran: ${out(b)}`);
  assert(!/PRIVATE KEY/.test(out(b)), `HOME's files are visible: ${out(b)}`);
});

await R.run('a link into /proc binds nothing of the daemon\'s', async () => {
  const b = await bash('environ 2>&1; cat /proc/1/environ 2>/dev/null | tr "\\0" "\\n" | grep -c DRUN_TEST_SECRET; true');
  assert(!/daemon-secret/.test(out(b)), `the daemon's environment leaked: ${out(b)}`);
});

await client.close();

await R.run('doctor runs the $PATH tools in the sandbox and names one that fails, with why', async () => {
  // a tool of doctor's list that works on the host and not in the sandbox: its
  // interpreter lives at the top of HOME (a name no other $PATH entry has, so the
  // shell's search cannot fall through to another copy)
  const bad = join(tmp, 'badlinks');
  mkdirSync(bad);
  writeFileSync(join(home, 'interp'), '#!/bin/sh\necho fine\n');
  chmodSync(join(home, 'interp'), 0o755);
  writeFileSync(join(bad, 'deno'), `#!${join(home, 'interp')}\n`);
  chmodSync(join(bad, 'deno'), 0o755);
  assert(spawnSync(join(bad, 'deno'), ['--version']).status === 0, 'the bad tool does not run on the host');
  const r = spawnSync(MCP, ['doctor', '--db', join(tmp, 'doc.db')], {
    env: { ...baseEnv, HOME: home, PATH: `${bad}:${PATH}` }, encoding: 'utf8',
  });
  assertEq(r.status, 1, `doctor exit status (output: ${r.stdout})`);
  assert(/^FAIL toolchain deno: '.*deno' runs on the host but exits 127 in the sandbox .*; fix: /m.test(r.stdout), `no FAIL line for deno: ${r.stdout}`);
  const good = spawnSync(MCP, ['doctor', '--db', join(tmp, 'doc.db')], {
    env: { ...baseEnv, HOME: home, PATH }, encoding: 'utf8',
  });
  assert(!/^FAIL toolchain/m.test(good.stdout), `a working toolchain failed: ${good.stdout}`);
  assert(/^ok   toolchains: .*fakepy|^ok   toolchains: /m.test(good.stdout), `no toolchains line: ${good.stdout}`);
});

R.done();
