# drun's build. `make` builds build/; `make test` runs every test; `make check` adds
# every suite again under ASan+UBSan (`make asan`) and the lint step.
#
# Sources are found by folder, so a new module needs no Makefile change:
#   src/<layer>/*.c, *.cpp   -> build/libdrun.a
#   src/cmd/drun_mcp*.c      -> build/drun-mcp
#   src/cmd/drun_admin*.c    -> build/drun-admin
#   src/cmd/drun_sqlite*.c   -> build/drun-sqlite.so (loadable SQLite extension)
#   tests/unit/test_*.c      -> build/tests/test_*   (each links libdrun.a)
#   migrations/*.sql         -> build/gen/migrations.c (compiled in)

CC      ?= cc
CXX     ?= c++
BUILD   ?= build
UNAME_S := $(shell uname -s)

PKGS := sqlite3 libzstd libcjson libuv libcurl libcrypto libpcre2-8 libgit2 libxml-2.0
ifeq ($(UNAME_S),Linux)
PKGS += libseccomp
endif

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   := $(shell pkg-config --libs $(PKGS))

WARN := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wvla -Wswitch-enum \
        -Wpointer-arith -Wundef -Wcast-align -Wnull-dereference
CWARN := $(WARN) -Wstrict-prototypes -Wmissing-prototypes -Wold-style-definition

OPT      ?= -O2 -g
SANITIZE ?=
CPPFLAGS += -D_GNU_SOURCE -Isrc -I$(BUILD)/gen $(PKG_CFLAGS)
CFLAGS   += -std=c11 $(OPT) $(SANITIZE) -fPIC $(CWARN)
CXXFLAGS += -std=c++17 $(OPT) $(SANITIZE) -fPIC $(WARN) -fno-exceptions -fno-rtti
LDFLAGS  += $(SANITIZE)
LDLIBS   += $(PKG_LIBS) -lstdc++ -lpthread -lm

# -Wformat-truncation (in -Wall) is on everywhere but in these files, which build paths
# with snprintf into fixed buffers without checking the result; they are being edited on
# other branches and get the check (or a struct buf) there. Remove a line once it builds.
NO_FORMAT_TRUNCATION := src/sandbox/bwrap_cgroup.c src/sandbox/sandbox.c tests/unit/test_host.c \
                        tests/unit/test_policy.c tests/unit/test_sandbox.c
$(foreach f,$(NO_FORMAT_TRUNCATION),$(eval $(BUILD)/obj/$(f:.c=.o): CFLAGS += -Wno-format-truncation))

LAYERS := util store workspace sandbox host fetch egress policy session snapfile tools mcp
LIB_C   := $(sort $(foreach l,$(LAYERS),$(wildcard src/$(l)/*.c)))
LIB_CXX := $(sort $(foreach l,$(LAYERS),$(wildcard src/$(l)/*.cpp)))
ifneq ($(UNAME_S),Linux)
LIB_C := $(filter-out src/sandbox/bwrap.c src/sandbox/bwrap_%.c,$(LIB_C))
endif
MIGRATIONS := $(sort $(wildcard migrations/*.sql))

LIB_OBJ := $(LIB_C:%.c=$(BUILD)/obj/%.o) $(LIB_CXX:%.cpp=$(BUILD)/obj/%.o) \
           $(BUILD)/obj/gen/migrations.o

MCP_SRC    := $(wildcard src/cmd/drun_mcp*.c)
ADMIN_SRC  := $(wildcard src/cmd/drun_admin*.c)
SQLEXT_SRC := $(wildcard src/cmd/drun_sqlite*.c)
TEST_SRC   := $(sort $(wildcard tests/unit/test_*.c))
TEST_BIN   := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

PROGS := $(if $(MCP_SRC),$(BUILD)/drun-mcp) $(if $(ADMIN_SRC),$(BUILD)/drun-admin) \
         $(if $(SQLEXT_SRC),$(BUILD)/drun-sqlite.so)

.PHONY: all test check lint unit asan bench clean format install uninstall
.SECONDARY:
all: $(PROGS) $(TEST_BIN)

$(BUILD)/gen/migrations.c: $(MIGRATIONS) tools/embed-migrations.sh
	@mkdir -p $(@D)
	sh tools/embed-migrations.sh $(MIGRATIONS) > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/gen/migrations.o: $(BUILD)/gen/migrations.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Wno-missing-prototypes -c $< -o $@

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	@echo "  CC  $<"
	@$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libdrun.a: $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/drun-mcp: $(MCP_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/libdrun.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/drun-admin: $(ADMIN_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/libdrun.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/drun-sqlite.so: $(SQLEXT_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/libdrun.a
	$(CC) $(LDFLAGS) -shared -o $@ $^ $(LDLIBS)

# build/tests/drun-mcp-testing: drun-mcp plus the test-only tools of tests/support/ (a slow,
# cancellable tool and an echo tool), registered through the registry's weak hook. Only
# the client tests start it; build/drun-mcp never contains those tools.
TESTING_SRC := $(wildcard tests/support/*.c)
ifneq ($(MCP_SRC),)
all: $(BUILD)/tests/drun-mcp-testing
endif
$(BUILD)/tests/drun-mcp-testing: $(MCP_SRC:%.c=$(BUILD)/obj/%.o) \
                                 $(TESTING_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/libdrun.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# build/tests/failmalloc.so: the LD_PRELOAD shim with which test_oom.mjs fails the N-th
# allocation of drun-mcp. Never built with the sanitizers, which replace malloc themselves.
ifneq ($(MCP_SRC),)
all: $(BUILD)/tests/failmalloc.so
endif
$(BUILD)/tests/failmalloc.so: tests/support/failmalloc/failmalloc.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -O2 -g -fPIC -shared -Wall -Wextra -Werror -o $@ $<

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(BUILD)/libdrun.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Every test: unit binaries, the SDK-client integration suite, raw protocol tests and
# the security suite. tests/run.sh prints the closing "N passed, N failed" line.
test: all
	sh tests/run.sh $(BUILD)

unit: all
	sh tests/run.sh $(BUILD) unit

# `make asan`: build/asan/ under AddressSanitizer + UndefinedBehaviorSanitizer, then every
# suite (unit, shell, client, security) against its binaries. Reports go to files in
# build/asan/sanitizer-logs/ (world-writable: the security suite runs a pass as nobody),
# so one from a process whose exit status no test looks at still fails the target.
# TEST_TIMEOUT: the allocation-failure sweep runs ~80 s under ASan, past the 60 s default.
ASAN_DIR  := build/asan
ASAN_LOGS := $(CURDIR)/$(ASAN_DIR)/sanitizer-logs
asan:
	$(MAKE) BUILD=$(ASAN_DIR) OPT="-O1 -g -fno-omit-frame-pointer" \
	        SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=all" all
	rm -rf $(ASAN_LOGS) && mkdir -p $(ASAN_LOGS) && chmod 1777 $(ASAN_LOGS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:log_path=$(ASAN_LOGS)/asan \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$(ASAN_LOGS)/ubsan \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tools/lsan.supp:print_suppressions=0 \
	TEST_TIMEOUT=300 sh tests/run.sh $(ASAN_DIR) $(or $(SUITE),all); rc=$$?; \
	if [ -n "$$(ls $(ASAN_LOGS))" ]; then \
	    cat $(ASAN_LOGS)/*; echo "sanitizer reports: see $(ASAN_LOGS)"; exit 1; \
	fi; exit $$rc

# Lint, every test, then all of them again under the sanitizers (make asan); ends with
# one "N passed, N failed, N skipped" line for both runs (tools/check.sh). CI runs this.
check: all
	+MAKE="$(MAKE)" sh tools/check.sh

lint:
	sh tools/lint.sh

format:
	clang-format -i $$(git ls-files 'src/*.c' 'src/*.h' 'src/*.cpp' 'tests/unit/*.c' 'tests/unit/*.h')

bench: all
	sh tools/bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD)

# `make install [PREFIX=/usr/local] [DESTDIR=...]`: the two programs, the SQLite
# extension and the docs. sqlite3's `.load drun-sqlite` passes the bare name to the
# dynamic loader (adding ".so"), which searches LD_LIBRARY_PATH and the system library
# directories (/usr/lib, /lib and their multiarch subdirectories), but not /usr/local/lib
# for a file whose name does not start with "lib". So with PREFIX=/usr the name alone
# works; elsewhere use the full path (.load /usr/local/lib/drun-sqlite), LD_LIBRARY_PATH,
# or SQLITE_EXTDIR=/usr/lib/$$(gcc -print-multiarch).
PREFIX        ?= /usr/local
BINDIR        ?= $(PREFIX)/bin
LIBDIR        ?= $(PREFIX)/lib
SQLITE_EXTDIR ?= $(LIBDIR)
DOCDIR        ?= $(PREFIX)/share/doc/drun
INSTALL       ?= install
INSTALL_DOCS  := README.md docs/architecture.md docs/security.md docs/tools.md \
                 docs/configuration.md docs/admin.md schema/README.md

# install builds nothing (so `sudo make install` leaves no root-owned files in build/, and
# an ASan build is installed as it was built): run `make` first.
install:
	@for f in $(BUILD)/drun-mcp $(BUILD)/drun-admin $(BUILD)/drun-sqlite.so; do \
	    [ -f "$$f" ] || { echo "make install: '$$f' is not built; run 'make' first" >&2; exit 1; }; \
	done
	$(INSTALL) -d -m 0755 "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(SQLITE_EXTDIR)" "$(DESTDIR)$(DOCDIR)"
	$(INSTALL) -m 0755 $(BUILD)/drun-mcp $(BUILD)/drun-admin "$(DESTDIR)$(BINDIR)/"
	$(INSTALL) -m 0644 $(BUILD)/drun-sqlite.so "$(DESTDIR)$(SQLITE_EXTDIR)/drun-sqlite.so"
	@for f in $(INSTALL_DOCS); do \
	    [ -f "$$f" ] || continue; \
	    case $$f in schema/*) n=schema.md ;; *) n=$$(basename "$$f") ;; esac; \
	    $(INSTALL) -m 0644 "$$f" "$(DESTDIR)$(DOCDIR)/$$n" || exit 1; \
	done
	@echo "installed drun-mcp and drun-admin in $(BINDIR), drun-sqlite.so in $(SQLITE_EXTDIR)"
	@echo "next: drun-mcp doctor --db ~/.drun/drun.db; drun-mcp init claude (or codex, gemini, cursor, vscode)"
	@case "$(SQLITE_EXTDIR)" in /usr/lib|/lib|/usr/lib/*-*|/lib/*-*) \
	    echo "sqlite3: .load drun-sqlite" ;; \
	 *) echo "sqlite3: .load $(SQLITE_EXTDIR)/drun-sqlite (the bare name needs LD_LIBRARY_PATH=$(SQLITE_EXTDIR))" ;; \
	 esac

uninstall:
	rm -f "$(DESTDIR)$(BINDIR)/drun-mcp" "$(DESTDIR)$(BINDIR)/drun-admin" \
	      "$(DESTDIR)$(SQLITE_EXTDIR)/drun-sqlite.so"
	rm -rf "$(DESTDIR)$(DOCDIR)"

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
