/*
 * test_mcp.c - the strict line check (RFC 8259, UTF-8, depth, spans) and the schema check.
 */
#include "test.h"

#include <cjson/cJSON.h>

#include "mcp/mcp_json.h"
#include "tools/tools.h"

static int
check(const char *t, struct mcp_json_scan *sc)
{
    return mcp_json_check(t, strlen(t), 64, sc);
}

TEST(check_accepts_rfc_json)
{
    struct mcp_json_scan sc;
    const char *yes[] = {"{}",
                         " [ ] ",
                         "0",
                         "-0",
                         "-0.5e+10",
                         "1E-2",
                         "123",
                         "\"\"",
                         "true",
                         "null",
                         "false",
                         "{\"a\":[1,2.5,\"x\\\"y\\\\\\/\\b\\f\\n\\r\\t\\u00e9\"],\"b\":{}}",
                         "[\"\\ud83d\\ude00\"]",
                         "\t[1]\r",
                         "[\"\xc3\xbc\xe2\x82\xac\xf0\x9f\x98\x80\"]"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        CHECK_EQ_INT(check(yes[i], &sc), 0);
        CHECK_EQ_INT(sc.uncarriable, 0);
    }
}

TEST(check_refuses_what_the_rfc_refuses)
{
    struct mcp_json_scan sc;
    const char *no[] = {"01",
                        "-",
                        "1.",
                        ".5",
                        "1e",
                        "+1",
                        "0x1",
                        "1 2",
                        "{}x",
                        "{} {}",
                        "[1,]",
                        "{\"a\":1,}",
                        "{a:1}",
                        "['a']",
                        "True",
                        "nul",
                        "[\"a\\qb\"]",
                        "[\"\\uqqqq\"]",
                        "[\"\\u12zz\"]",
                        "[\"a\tb\"]",
                        "[\"\x1f\"]",
                        "\xef\xbb\xbf{}",
                        "[\"\xc0\xaf\"]",
                        "[\"\xed\xa0\x80\"]",
                        "\f[]",
                        "[",
                        "\"abc",
                        "{\"a\"}",
                        "[1]]",
                        "",
                        "   ",
                        "\x01", /* a control byte outside a string */
                        "[\x01]",
                        "{\"a\":\x01}"};
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        CHECK_EQ_INT(check(no[i], &sc), -1);
        CHECK(sc.why != NULL);
    }
    /* a raw NUL byte, which strlen would not see */
    CHECK_EQ_INT(mcp_json_check("[\"a\0b\"]", 7, 64, &sc), -1);
    CHECK(strstr(sc.why, "NUL") != NULL);
}

TEST(check_depth_bound)
{
    struct mcp_json_scan sc;
    CHECK_EQ_INT(mcp_json_check("[[[]]]", 6, 3, &sc), 0);
    CHECK_EQ_INT(mcp_json_check("[[[[]]]]", 8, 3, &sc), -1);
    CHECK_EQ_INT(sc.too_deep, 1);
    CHECK_EQ_INT(mcp_json_check("[\"[[[[[\"]", 9, 1, &sc), 0); /* brackets in strings */
}

TEST(check_records_exact_spans)
{
    struct mcp_json_scan sc;
    const char *t = "{ \"x\": {\"id\": 2}, \"i\\u0064\" : 123456789012345678901234567890 , "
                    "\"id\":5, \"params\":{\"_meta\":{\"progressToken\":1180591620717411303424},"
                    "\"arguments\":{\"a\":[1]},\"requestId\":\"r\"}}";
    const struct mcp_json_span *sp;

    CHECK_EQ_INT(check(t, &sc), 0);
    sp = &sc.slot[MCP_SLOT_ID];
    CHECK(sp->found && sp->kind == MCP_JSON_INTEGER);
    CHECK_EQ_INT(sp->len, 30);
    CHECK(strncmp(t + sp->start, "123456789012345678901234567890", sp->len) == 0);
    sp = &sc.slot[MCP_SLOT_TOKEN];
    CHECK(sp->found && strncmp(t + sp->start, "1180591620717411303424", sp->len) == 0);
    sp = &sc.slot[MCP_SLOT_ARGUMENTS];
    CHECK(sp->found && sp->kind == MCP_JSON_OBJECT &&
          strncmp(t + sp->start, "{\"a\":[1]}", sp->len) == 0);
    sp = &sc.slot[MCP_SLOT_REQUEST_ID];
    CHECK(sp->found && sp->kind == MCP_JSON_STRING && strncmp(t + sp->start, "\"r\"", 3) == 0);
    CHECK_EQ_INT(check("{\"id\":1.5}", &sc), 0);
    CHECK_EQ_INT(sc.slot[MCP_SLOT_ID].kind, MCP_JSON_NUMBER);
    CHECK_EQ_INT(check("[{\"id\":1}]", &sc), 0);
    CHECK_EQ_INT(sc.slot[MCP_SLOT_ID].found, 0); /* only the top-level object's */
}

TEST(check_flags_what_drun_cannot_carry)
{
    struct mcp_json_scan sc;
    const char *yes[] = {"{\"a\":\"x\\u0000y\"}", "[\"\\u0000\"]", "{\"\\u0000\":1}",
                         "[\"\\ud800x\"]",        "[\"\\udc00\"]", "[\"\\ud800\\u0041\"]"};
    const char *no[] = {"{\"a\":\"x\\\\u0000\"}", "{\"a\":\"\\u0001\"}", "[\"\\ud800\\udc00\"]"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        char copy[64];
        size_t n = strlen(yes[i]);
        cJSON *j;
        CHECK_EQ_INT(check(yes[i], &sc), 0);
        CHECK_EQ_INT(sc.uncarriable, 1);
        memcpy(copy, yes[i], n);
        mcp_json_neutralize(copy, n);
        CHECK_EQ_INT(mcp_json_check(copy, n, 64, &sc), 0);
        CHECK_EQ_INT(sc.uncarriable, 0);
        j = cJSON_ParseWithLength(copy, n);
        CHECK(j != NULL);
        cJSON_Delete(j);
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        CHECK_EQ_INT(check(no[i], &sc), 0);
        CHECK_EQ_INT(sc.uncarriable, 0);
    }
}

static int
check_args(const char *schema_text, const char *args_text, struct buf *msg)
{
    cJSON *schema = cJSON_ParseWithLength(schema_text, strlen(schema_text));
    cJSON *args = cJSON_ParseWithLength(args_text, strlen(args_text));
    int rc = tools_schema_check(schema, args, msg);
    cJSON_Delete(schema);
    cJSON_Delete(args);
    return rc;
}

TEST(schema_check_edges)
{
    const char *s =
        "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":1,"
        "\"maximum\":3},\"s\":{\"type\":\"string\",\"maxLength\":2}},"
        "\"required\":[\"n\"],\"additionalProperties\":false}";
    struct buf msg;
    buf_init(&msg, 1024);
    CHECK(check_args(s, "{\"n\":1,\"s\":\"\xc3\xbc\xc3\xbc\"}", &msg) == 0);
    CHECK(check_args(s, "{\"n\":3}", &msg) == 0);
    CHECK(check_args(s, "{\"n\":4}", &msg) < 0);
    CHECK(strstr(buf_cstr(&msg), "argument 'n' must be at most 3") != NULL);
    buf_reset(&msg);
    CHECK(check_args(s, "{\"n\":0}", &msg) < 0);
    buf_reset(&msg);
    CHECK(check_args(s, "{\"n\":1,\"s\":\"abc\"}", &msg) < 0);
    CHECK(strstr(buf_cstr(&msg), "3 characters long; the limit is 2") != NULL);
    buf_reset(&msg);
    CHECK(check_args(s, "{}", &msg) < 0);
    CHECK_EQ_STR(buf_cstr(&msg), "missing required argument 'n'");
    buf_reset(&msg);
    CHECK(check_args(s, "{\"n\":1,\"z\":1}", &msg) < 0);
    CHECK(strstr(buf_cstr(&msg), "unknown argument 'z'; expected one of: n, s") != NULL);
    buf_reset(&msg);
    CHECK(check_args(s, "{\"n\":1e300}", &msg) < 0);
    buf_release(&msg);
}

TEST(registry_order_and_duplicates)
{
    struct err err;
    CHECK_OK(tools_registry_init(&err), &err);
    CHECK(tools_count() >= 2);
    {
        /* The fixed order (reference section 1.3), whichever families are registered. */
        static const char *const order[] = {
            "session_mount",    "session_export",          "delete_from_host",
            "get_config",       "get_system_instructions", "list_snapshots",
            "session_snapshot", "session_restore",         "session_get_env"};
        size_t last = 0;
        for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
            size_t at = tools_count();
            for (size_t i = 0; i < tools_count(); i++) {
                if (strcmp(tools_at(i)->name, order[k]) == 0) {
                    at = i;
                }
            }
            CHECK(at < tools_count());
            CHECK(k == 0 || at > last);
            last = at;
        }
    }
    CHECK(tools_register(tools_config_defs, 1, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_EXISTS);
    tools_registry_reset();
}

TESTS(check_accepts_rfc_json, check_refuses_what_the_rfc_refuses, check_depth_bound,
      check_records_exact_spans, check_flags_what_drun_cannot_carry, schema_check_edges,
      registry_order_and_duplicates)
