#!/bin/sh
# t0543-host-path-toolchains.sh - what the sandbox binds for the daemon's $PATH (shim
# managers' roots, link targets, "#!" interpreters) must never open the daemon's secrets:
#
#   - a pyenv-style shim and a link into a runtime run (the binds exist at all)
#   - $HOME itself as a $PATH entry, a link on $PATH to a file at the top of $HOME, and
#     a manager variable naming $HOME do not bind $HOME (its ~/.ssh stays unreadable)
#   - PYENV_ROOT=/, ASDF_DATA_DIR=/proc/self/root and a link to /proc/self/environ bind
#     neither "/" nor anything of /proc: the daemon's environment stays unread
#   - a manager root that holds drun's config and DB (the operator keeps ~/.drun under
#     it) is bound with them covered
#
# Every pass: as the current user and (as root) as nobody, cold and warm sandboxes.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/host_lib.sh"
host_need "the \$PATH toolchain binds open no secrets"

cat >"$T_TMP/attack.mjs" <<'JS'
import { chmodSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
const { start, check, done, dir } = await import(process.env.T_PRELUDE);
function script(p, body) {
  writeFileSync(p, `#!/bin/sh\n${body}\n`);
  chmodSync(p, 0o755);
}
const home = `${dir}/home`;
mkdirSync(`${home}/.ssh`, { recursive: true });
writeFileSync(`${home}/.ssh/id_test`, 'PRIVATE KEY\n');
script(`${home}/tool.sh`, 'echo home tool');
const root = `${dir}/tc/.pyenv`;
mkdirSync(`${root}/shims`, { recursive: true });
mkdirSync(`${root}/versions/1/bin`, { recursive: true });
script(`${root}/versions/1/bin/fakepy`, 'echo fakepy ok');
script(`${root}/shims/fakepy`, `exec '${root}/versions/1/bin/fakepy' "$@"`);
// drun's own config and DB inside the manager's root
mkdirSync(`${root}/drun`, { recursive: true });
const links = `${dir}/links`;
mkdirSync(links);
symlinkSync(`${home}/tool.sh`, `${links}/hometool`);
symlinkSync('/proc/self/environ', `${links}/environ`);
symlinkSync('/', `${links}/slash`);
// rustup-style: ~/.cargo/bin/cargo -> rustup beside it; ~/.cargo holds credentials
const cargo = `${dir}/tc/.cargo`;
mkdirSync(`${cargo}/bin`, { recursive: true });
script(`${cargo}/bin/rustup`, 'echo rustup ok');
symlinkSync('rustup', `${cargo}/bin/cargo`);
writeFileSync(`${cargo}/credentials.toml`, '[registry]\ntoken = "SECRET-TOKEN"\n');
const PATH = `${root}/shims:${links}:${cargo}/bin:${home}:/usr/local/bin:/usr/bin:/bin`;
const d = await start({
  configPath: `${root}/drun/config.toml`, dbPath: `${root}/drun/drun.db`, config: 'bash_timeout_ms = 30000\n',
  env: { HOME: home, PATH, PYENV_ROOT: '/', ASDF_DATA_DIR: '/proc/self/root', VOLTA_HOME: home,
    MISE_DATA_DIR: '', RBENV_ROOT: 'relative', DRUN_T0540_SECRET: 'daemon-secret' },
});
const s = await d.session();

await check('a pyenv-style shim runs the interpreter under its root', async () => {
  const b = await d.bash(s, 'fakepy');
  return b.exit_code === 0 && b.stdout_tail === 'fakepy ok\n' || `exit ${b.exit_code}: ${b.stderr_tail}`;
});
await check('$HOME as an entry, a link into it, VOLTA_HOME=$HOME: HOME stays unbound', async () => {
  const b = await d.bash(s, `cat '${home}/.ssh/id_test' 2>&1; ls '${home}' 2>&1; hometool; echo rc=$?`);
  return !/PRIVATE KEY|tool\.sh\n/.test(b.stdout_tail) && /rc=127/.test(b.stdout_tail) || JSON.stringify(b.stdout_tail + b.stderr_tail);
});
await check('a link beside its target (rustup) runs and does not bind the prefix (credentials)', async () => {
  const b = await d.bash(s, `cargo; cat '${cargo}/credentials.toml' 2>&1; true`);
  return /rustup ok/.test(b.stdout_tail) && !/SECRET-TOKEN/.test(b.stdout_tail) || JSON.stringify(b.stdout_tail);
});
await check('PYENV_ROOT=/ and a link to / do not bind the host root', async () => {
  const b = await d.bash(s, 'ls /; test -e /var && echo SEES-VAR; test -e /srv && echo SEES-SRV; true');
  return !/SEES-/.test(b.stdout_tail) || JSON.stringify(b.stdout_tail);
});
await check('ASDF_DATA_DIR=/proc/self/root and a link to /proc/self/environ leak nothing', async () => {
  const b = await d.bash(s, "environ 2>/dev/null; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c T0540; env | grep -c -e T0540 -e ASDF -e VOLTA; true");
  return !/daemon-secret/.test(b.stdout_tail) && !/ASDF_DATA_DIR|VOLTA_HOME/.test(b.stdout_tail) || JSON.stringify(b.stdout_tail + b.stderr_tail);
});
await check('drun\'s config and DB inside a bound manager root are covered', async () => {
  const b = await d.bash(s, `for f in '${root}'/drun/*; do cat "$f" 2>/dev/null; done | head -c 64 | od -c | head -2; ls '${root}/versions'`);
  return !/S   Q   L   i   t   e|b   a   s   h   _/.test(b.stdout_tail) && /^1$/m.test(b.stdout_tail) ||
    JSON.stringify(b.stdout_tail + b.stderr_tail);
});
await d.stop();
done();
JS
host_run_passes
t_done
