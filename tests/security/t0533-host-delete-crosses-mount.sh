#!/bin/sh
# t0533-host-delete-crosses-mount.sh - delete_from_host of a directory never crosses a
# mount, even a bind mount of the same filesystem (same st_dev, another mount id):
#
#   - allow/victim/sub is a bind mount of a directory outside the allowlist: deleting
#     allow/victim is refused, and nothing is removed, outside or in victim
#   - deleting the mount point itself is refused
#
# The bind mount lives in a private mount namespace made for each pass (unshare -m, as
# root; the nobody pass drops to nobody inside it). Without root the pass tries a user
# namespace (unshare -Urm) and skips with the reason when that is not possible either.
# Every pass: as the current user and (as root) as nobody, cold and warm sandboxes.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/host_lib.sh"
host_need "delete_from_host never crosses a mount"

if [ "$(id -u)" -eq 0 ]; then
    ns="unshare --mount --propagation private"
elif unshare -Urm true 2>/dev/null; then
    ns="unshare -Urm"
else
    t_begin "delete_from_host never crosses a mount"
    t_skip "cannot make a mount namespace here (not root, no unprivileged user namespaces)"
    t_done
fi

# host_pass_wrap DIR CMD...: the pass in its own mount namespace with the bind mount made.
host_pass_wrap() {
    d=$1
    shift
    owner=$(stat -c %u:%g "$d")
    mkdir -p "$d/allow/victim/sub" "$d/outside" &&
        echo keep >"$d/allow/victim/a.txt" && echo keep >"$d/outside/keep.txt" &&
        chown -R "$owner" "$d/allow" "$d/outside" || return 1
    # shellcheck disable=SC2086
    $ns sh -c 'mount --bind "$0/outside" "$0/allow/victim/sub" && exec "$@"' "$d" "$@"
}

cat >"$T_TMP/attack.mjs" <<'JS'
import { existsSync } from 'node:fs';
const { start, check, done, dir } = await import(process.env.T_PRELUDE);
const d = await start({ config: `mount_allowlist = ["${dir}/allow"]\n` });

await check('deleting a directory that holds a bind mount is refused and removes nothing', async () => {
  if (!existsSync(`${dir}/allow/victim/sub/keep.txt`)) return 'setup: the bind mount is not there';
  const r = await d.tool('delete_from_host', { path: `${dir}/allow/victim` });
  const gone = [`${dir}/outside/keep.txt`, `${dir}/allow/victim/a.txt`].filter((p) => !existsSync(p));
  if (gone.length) return `removed ${gone.join(', ')} (answer: ${JSON.stringify(r.body).slice(0, 200)})`;
  if (!r.isError) return 'the delete answered success';
  return true;
});

await check('deleting the mount point itself is refused', async () => {
  const r = await d.tool('delete_from_host', { path: `${dir}/allow/victim/sub` });
  if (!existsSync(`${dir}/outside/keep.txt`)) return 'removed the file outside the allowlist';
  return r.isError || 'the delete answered success';
});

await d.stop();
done();
JS
host_run_passes
t_done
