#!/bin/sh
# t0534-host-export-vcs-hooks.sh - session_export does not write what the host's next git
# command would run, unless the operator sets export_vcs_hooks = true:
#
#   - .git/hooks/* and .git/config (core.fsmonitor), at the top and in a subdirectory
#   - a .git file ("gitdir: ../evil") that points git at a directory of hooks
#   - each is skipped and listed with the reason; ordinary files are exported
#   - with export_vcs_hooks = true they are exported
#
# Every pass: as the current user and (as root) as nobody, cold and warm sandboxes.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/host_lib.sh"
host_need "session_export does not write VCS hooks"

cat >"$T_TMP/attack.mjs" <<'JS'
import { existsSync, mkdirSync } from 'node:fs';
const { start, check, done, dir, writeConfig } = await import(process.env.T_PRELUDE);
mkdirSync(`${dir}/allow`, { recursive: true });
const config = `mount_allowlist = ["${dir}/allow"]\n`;
const d = await start({ config });
const s = await d.session();
await d.bash(s, [
  'mkdir -p .git/hooks sub/.git/hooks sub2 evil/hooks',
  'printf "#!/bin/sh\\ntouch /tmp/pwned\\n" > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout',
  'printf "[core]\\n\\tfsmonitor = touch /tmp/pwned\\n" > .git/config',
  'cp .git/config sub/.git/config && cp .git/hooks/post-checkout sub/.git/hooks/pre-commit',
  'echo "gitdir: ../evil" > sub2/.git',
  'echo hello > README',
].join(' && '));
const hooks = ['.git/hooks/post-checkout', '.git/config', 'sub/.git/config', 'sub/.git/hooks/pre-commit', 'sub2/.git'];

await check('.git/hooks, .git/config and a .git file are skipped with the reason', async () => {
  const r = await d.ok('session_export', { output_dir: `${dir}/allow/a`, description: 'x', session_id: s });
  const written = hooks.filter((k) => existsSync(`${dir}/allow/a/${k}`));
  if (written.length) return `exported ${written.join(', ')}`;
  const listed = hooks.filter((k) => r.skipped.some((x) => x.path === k && /export_vcs_hooks/.test(x.why)));
  if (listed.length !== hooks.length) return `skipped lists ${JSON.stringify(r.skipped).slice(0, 300)}`;
  if (!existsSync(`${dir}/allow/a/README`)) return 'README was not exported';
  return true;
});

await check('with export_vcs_hooks = true they are exported', async () => {
  writeConfig(d.configPath, `${config}export_vcs_hooks = true\n`);
  await d.ok('session_export', { output_dir: `${dir}/allow/b`, description: 'x', session_id: s });
  writeConfig(d.configPath, config);
  const missing = hooks.filter((k) => !existsSync(`${dir}/allow/b/${k}`));
  return missing.length === 0 || `not exported: ${missing.join(', ')}`;
});

await d.stop();
done();
JS
host_run_passes
t_done
