/*
 * test_mcp.c - the byte-level line checks (UTF-8, depth, raw id) and the schema check.
 */
#include "test.h"

#include <cjson/cJSON.h>

#include "mcp/mcp_json.h"
#include "tools/tools.h"

TEST(utf8_accepts_and_refuses)
{
    size_t bad = 0;
    CHECK(mcp_utf8_valid("a\xc3\xbc\xe2\x82\xac\xf0\x9f\x98\x80", 10, NULL));
    CHECK(!mcp_utf8_valid("ab\xc0\xaf", 4, &bad));
    CHECK_EQ_INT(bad, 2);
    CHECK(!mcp_utf8_valid("\xed\xa0\x80", 3, NULL));     /* surrogate */
    CHECK(!mcp_utf8_valid("\xf4\x90\x80\x80", 4, NULL)); /* past U+10FFFF */
    CHECK(!mcp_utf8_valid("\xe2\x82", 2, NULL));         /* cut short */
    CHECK(!mcp_utf8_valid("\x80", 1, NULL));
}

TEST(depth_counts_outside_strings)
{
    CHECK_EQ_INT(mcp_json_depth("{\"a\":[[1]]}", 11, 64), 3);
    CHECK_EQ_INT(mcp_json_depth("{\"a\":\"[[[[\\\"[[\"}", 16, 64), 1);
    CHECK_EQ_INT(mcp_json_depth("[[[[", 4, 3), 4); /* stops at max + 1 */
}

TEST(raw_member_finds_exact_text)
{
    const char *t =
        "{ \"x\": {\"id\": 2}, \"i\\u0064\" : 123456789012345678901234567890 , \"id\":5}";
    const char *s = NULL;
    size_t n = 0;
    CHECK(mcp_json_raw_member(t, strlen(t), "id", &s, &n) == 0);
    CHECK_EQ_INT(n, 30);
    CHECK(strncmp(s, "123456789012345678901234567890", n) == 0);
    CHECK(mcp_json_raw_member("[1]", 3, "id", &s, &n) < 0);
    CHECK(mcp_json_raw_member("{\"a\":1}", 7, "id", &s, &n) < 0);
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

TEST(nul_escape_found_only_inside_strings)
{
    const char *yes[] = {"{\"a\":\"x\\u0000y\"}", "[\"\\u0000\"]", "{\"\\u0000\":1}"};
    const char *no[] = {"{\"a\":\"x\\\\u0000\"}", "{\"a\":\"\\u0001\"}"};
    for (size_t i = 0; i < 3; i++) {
        CHECK_EQ_INT(mcp_json_has_nul(yes[i], strlen(yes[i])), 1);
    }
    CHECK_EQ_INT(mcp_json_has_nul(no[0], strlen(no[0])), 0); /* an escaped backslash */
    CHECK_EQ_INT(mcp_json_has_nul(no[1], strlen(no[1])), 0); /* another escape */
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

TESTS(utf8_accepts_and_refuses, depth_counts_outside_strings, raw_member_finds_exact_text,
      schema_check_edges, registry_order_and_duplicates, nul_escape_found_only_inside_strings)
