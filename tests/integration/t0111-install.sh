#!/bin/sh
# `make install` into a DESTDIR: the programs, the SQLite extension where sqlite3's
# `.load` finds it, the docs; PREFIX honoured; `make uninstall` removes all of it.
. "$(dirname "$0")/../lib.sh"

D="$T_TMP/dest"
inst() { make -s -C "$T_TOP" BUILD="$BUILD" DESTDIR="$D" "$@" >"$T_TMP/out" 2>&1; }

t_begin "make install DESTDIR=... puts the programs, the extension and the docs under PREFIX"
if inst install; then
    ok=1
    for f in bin/drun-mcp bin/drun-admin; do
        [ -x "$D/usr/local/$f" ] && [ "$(stat -c %a "$D/usr/local/$f")" = 755 ] || ok=0
    done
    [ "$(stat -c %a "$D/usr/local/lib/drun-sqlite.so" 2>/dev/null)" = 644 ] || ok=0
    for f in README.md configuration.md admin.md tools.md; do
        [ -f "$D/usr/local/share/doc/drun/$f" ] || ok=0
    done
    [ "$ok" = 1 ] && t_ok || t_fail "$(find "$D" | sort)"
else
    t_fail "$(cat "$T_TMP/out")"
fi

t_begin "the installed programs run"
"$D/usr/local/bin/drun-mcp" --version >/dev/null && "$D/usr/local/bin/drun-admin" --version >/dev/null &&
    t_ok || t_fail "--version failed"

if command -v sqlite3 >/dev/null 2>&1; then
    # An ASan build's extension (make check) loads into the uninstrumented sqlite3 only
    # with the ASan runtime preloaded.
    asan_rt=$(ldd "$BUILD/drun-sqlite.so" 2>/dev/null | awk '/libasan/ { print $3 }')
    db="$T_TMP/x.db"
    "$D/usr/local/bin/drun-admin" --db "$db" db migrate >/dev/null
    q="select count(*) from pragma_function_list where name = 'drun_blob';"
    t_begin "sqlite3 .load with the installed path (no suffix)"
    r=$(LD_PRELOAD="$asan_rt" sqlite3 "$db" ".load $D/usr/local/lib/drun-sqlite" "$q" 2>&1)
    [ "$r" = 1 ] && t_ok || t_fail "$r"
    t_begin "sqlite3 .load drun-sqlite by name, the directory on the loader's path"
    r=$(cd "$T_TMP" && LD_PRELOAD="$asan_rt" LD_LIBRARY_PATH="$D/usr/local/lib" sqlite3 "$db" \
        ".load drun-sqlite" "$q" 2>&1)
    [ "$r" = 1 ] && t_ok || t_fail "$r"
    t_begin "make install says how to .load it from a PREFIX off the loader's path"
    grep -q "\.load /usr/local/lib/drun-sqlite" "$T_TMP/out" && t_ok || t_fail "$(cat "$T_TMP/out")"
else
    t_begin "sqlite3 .load"
    t_skip "no sqlite3 command"
fi

t_begin "make install with nothing built says to run make first, installs nothing"
if make -s -C "$T_TOP" BUILD="$T_TMP/empty-build" DESTDIR="$T_TMP/d2" install >"$T_TMP/out" 2>&1; then
    t_fail "it succeeded"
else
    grep -q "is not built; run 'make' first" "$T_TMP/out" && [ ! -e "$T_TMP/d2" ] && t_ok ||
        t_fail "$(cat "$T_TMP/out")"
fi

t_begin "make uninstall removes what install put"
inst uninstall && [ -z "$(find "$D" -type f)" ] && t_ok || t_fail "$(find "$D" -type f)"

t_begin "PREFIX=/usr: the extension goes where .load finds it by name"
inst PREFIX=/usr install && [ -f "$D/usr/lib/drun-sqlite.so" ] && [ -x "$D/usr/bin/drun-mcp" ] &&
    grep -q "^sqlite3: \.load drun-sqlite$" "$T_TMP/out" && t_ok || t_fail "$(cat "$T_TMP/out")"
inst PREFIX=/usr uninstall

t_done
