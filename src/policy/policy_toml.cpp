/*
 * policy_toml.cpp - the only C++ in drun: toml++ behind the C interface of
 * policy_toml.h.
 *
 * toml++ is built without exceptions (TOML_EXCEPTIONS 0), so toml::parse returns a
 * parse_result that holds either the table or an error with its source position; we
 * check it and turn the error into a struct err. Node handles are toml::node pointers
 * cast to an opaque C type; the document owns them all. Allocation failures inside
 * the C++ standard library abort (there are no exceptions to catch); the input is
 * capped by the caller, so that is the only way for it to run out of memory.
 */
#define TOML_EXCEPTIONS        0
#define TOML_ENABLE_FORMATTERS 0
#include <toml++/toml.h>

#include <new>
#include <string>
#include <string_view>

/* util/err.h has no C++ guards of its own: err_set() must keep C linkage. */
extern "C" {
#include "util/err.h"
}
#include "policy/policy_toml.h"

struct ptoml {
    toml::table table;
};

static const toml::node *
node_of(const struct ptoml_node *n)
{
    return reinterpret_cast<const toml::node *>(n);
}

static const struct ptoml_node *
handle_of(const toml::node *n)
{
    return reinterpret_cast<const struct ptoml_node *>(n);
}

extern "C" int
ptoml_parse(const char *text, size_t len, const char *name, struct ptoml **out, struct err *err)
{
    *out = nullptr;
    toml::parse_result r =
        toml::parse(std::string_view(text, len), std::string_view(name ? name : "config"));
    if (!r) {
        const toml::parse_error &e = r.error();
        std::string what(e.description());
        return err_set(err, ERR_INVAL, "cannot parse '%s' at line %u, column %u: %s",
                       name ? name : "config", (unsigned)e.source().begin.line,
                       (unsigned)e.source().begin.column, what.c_str());
    }
    struct ptoml *doc = new (std::nothrow) struct ptoml;
    if (doc == nullptr) {
        return err_set(err, ERR_NOMEM, "out of memory parsing '%s'", name ? name : "config");
    }
    doc->table = std::move(r.table());
    *out = doc;
    return 0;
}

extern "C" void
ptoml_free(struct ptoml *doc)
{
    delete doc;
}

extern "C" const struct ptoml_node *
ptoml_root(const struct ptoml *doc)
{
    return handle_of(&doc->table);
}

extern "C" int
ptoml_type(const struct ptoml_node *h)
{
    const toml::node *n = node_of(h);
    if (n == nullptr) {
        return PTOML_NONE;
    }
    switch (n->type()) {
    case toml::node_type::table:
        return PTOML_TABLE;
    case toml::node_type::array:
        return PTOML_ARRAY;
    case toml::node_type::string:
        return PTOML_STRING;
    case toml::node_type::integer:
        return PTOML_INT;
    case toml::node_type::floating_point:
        return PTOML_FLOAT;
    case toml::node_type::boolean:
        return PTOML_BOOL;
    case toml::node_type::date:
        return PTOML_DATE;
    case toml::node_type::time:
        return PTOML_TIME;
    case toml::node_type::date_time:
        return PTOML_DATETIME;
    case toml::node_type::none:
        break;
    }
    return PTOML_NONE;
}

extern "C" const char *
ptoml_type_name(int type)
{
    switch (type) {
    case PTOML_TABLE:
        return "table";
    case PTOML_ARRAY:
        return "array";
    case PTOML_STRING:
        return "string";
    case PTOML_INT:
        return "integer";
    case PTOML_FLOAT:
        return "float";
    case PTOML_BOOL:
        return "boolean";
    case PTOML_DATE:
        return "date";
    case PTOML_TIME:
        return "time";
    case PTOML_DATETIME:
        return "date-time";
    default:
        return "nothing";
    }
}

extern "C" int
ptoml_is_inline(const struct ptoml_node *h)
{
    const toml::node *n = node_of(h);
    if (n == nullptr) {
        return 0;
    }
    if (const toml::table *t = n->as_table()) {
        return t->is_inline() ? 1 : 0;
    }
    if (const toml::array *a = n->as_array()) {
        if (a->empty() || !a->is_array_of_tables()) {
            return 1;
        }
        const toml::table *t = (*a)[0].as_table();
        return t != nullptr && t->is_inline() ? 1 : 0;
    }
    return 1;
}

extern "C" size_t
ptoml_len(const struct ptoml_node *h)
{
    const toml::node *n = node_of(h);
    if (n == nullptr) {
        return 0;
    }
    if (const toml::table *t = n->as_table()) {
        return t->size();
    }
    if (const toml::array *a = n->as_array()) {
        return a->size();
    }
    return 0;
}

extern "C" const struct ptoml_node *
ptoml_index(const struct ptoml_node *h, size_t i)
{
    const toml::node *n = node_of(h);
    const toml::array *a = n ? n->as_array() : nullptr;
    if (a == nullptr || i >= a->size()) {
        return nullptr;
    }
    return handle_of(a->get(i));
}

extern "C" const struct ptoml_node *
ptoml_get(const struct ptoml_node *h, const char *key)
{
    const toml::node *n = node_of(h);
    const toml::table *t = n ? n->as_table() : nullptr;
    if (t == nullptr) {
        return nullptr;
    }
    return handle_of(t->get(std::string_view(key)));
}

extern "C" int
ptoml_each(const struct ptoml_node *h,
           int (*fn)(void *ctx, const char *key, const struct ptoml_node *val), void *ctx)
{
    const toml::node *n = node_of(h);
    const toml::table *t = n ? n->as_table() : nullptr;
    if (t == nullptr) {
        return 0;
    }
    for (auto &&[k, v] : *t) {
        std::string key(k.str());
        int rc = fn(ctx, key.c_str(), handle_of(&v));
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

extern "C" const char *
ptoml_string(const struct ptoml_node *h, size_t *len)
{
    const toml::node *n = node_of(h);
    const toml::value<std::string> *s = n ? n->as_string() : nullptr;
    if (s == nullptr) {
        return nullptr;
    }
    if (len != nullptr) {
        *len = s->get().size();
    }
    return s->get().c_str();
}

extern "C" int64_t
ptoml_int(const struct ptoml_node *h)
{
    const toml::node *n = node_of(h);
    const toml::value<int64_t> *v = n ? n->as_integer() : nullptr;
    return v ? v->get() : 0;
}

extern "C" int
ptoml_bool(const struct ptoml_node *h)
{
    const toml::node *n = node_of(h);
    const toml::value<bool> *v = n ? n->as_boolean() : nullptr;
    return v && v->get() ? 1 : 0;
}

extern "C" struct ptoml_pos
ptoml_begin(const struct ptoml_node *h)
{
    struct ptoml_pos p = {0, 0};
    const toml::node *n = node_of(h);
    if (n != nullptr) {
        p.line = n->source().begin.line;
        p.col = n->source().begin.column;
    }
    return p;
}

extern "C" struct ptoml_pos
ptoml_end(const struct ptoml_node *h)
{
    struct ptoml_pos p = {0, 0};
    const toml::node *n = node_of(h);
    if (n != nullptr) {
        p.line = n->source().end.line;
        p.col = n->source().end.column;
    }
    return p;
}
