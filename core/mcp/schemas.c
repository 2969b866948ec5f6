#include "core/mcp/schemas.h"

#include <stdlib.h>
#include <string.h>

#include "core/base/buf.h"
#include "core/base/json.h"

/* { upstream: { tool: inputSchema } }, a cJSON tree the store owns. */
struct tg_mcp_schemas {
    cJSON *by_upstream;
};

struct tg_mcp_schemas *tg_mcp_schemas_new(void)
{
    struct tg_mcp_schemas *s = tg_xcalloc(1, sizeof(*s));
    s->by_upstream = cJSON_CreateObject();
    return s;
}

void tg_mcp_schemas_free(struct tg_mcp_schemas *s)
{
    if (s == NULL)
        return;
    cJSON_Delete(s->by_upstream);
    free(s);
}

/* 1 if any property below schema carries x-mcp-header (a cheap look: the validity is judged when
 * the tool is listed to a 2026 client and when a call is checked). */
static int annotated(const cJSON *node, int depth)
{
    if (depth > 32 || (!cJSON_IsObject(node) && !cJSON_IsArray(node)))
        return 0;
    for (const cJSON *c = node->child; c; c = c->next) {
        if (c->string != NULL && strcmp(c->string, "x-mcp-header") == 0)
            return 1;
        if (annotated(c, depth + 1))
            return 1;
    }
    return 0;
}

void tg_mcp_schemas_learn(struct tg_mcp_schemas *s, const char *upstream, const char *answer, size_t n)
{
    struct tg_json_doc doc;
    if (tg_json_parse(answer, n, 64, 1, &doc, NULL, NULL) != 0)
        return;
    cJSON *tools = tg_json_get(tg_json_get(doc.root, "result"), "tools");
    cJSON *mine = tg_json_get(s->by_upstream, upstream);
    for (cJSON *t = cJSON_IsArray(tools) ? tools->child : NULL; t != NULL; t = t->next) {
        cJSON *name = tg_json_get(t, "name");
        cJSON *schema = tg_json_get(t, "inputSchema");
        if (!cJSON_IsString(name))
            continue;
        int keep = annotated(schema, 0);
        if (keep) {
            /* An upstream chooses these sizes: a schema over TG_MCP_SCHEMA_BYTES is not learnt
             * (its Mcp-Param-* headers then go as they came, for the upstream to check). */
            char *text = cJSON_PrintUnformatted(schema);
            keep = text != NULL && strlen(text) <= TG_MCP_SCHEMA_BYTES;
            free(text);
        }
        if (mine != NULL && tg_json_get(mine, name->valuestring) != NULL) {
            cJSON_DeleteItemFromObjectCaseSensitive(mine, name->valuestring);
        } else if (keep && mine != NULL && cJSON_GetArraySize(mine) >= TG_MCP_SCHEMAS_MAX) {
            continue;
        }
        if (!keep)
            continue;
        if (mine == NULL)
            mine = cJSON_AddObjectToObject(s->by_upstream, upstream);
        cJSON_AddItemToObject(mine, name->valuestring, cJSON_Duplicate(schema, 1));
    }
    cJSON_Delete(doc.root);
}

const cJSON *tg_mcp_schemas_find(const struct tg_mcp_schemas *s, const char *upstream, const char *tool)
{
    const cJSON *mine = tg_json_get(s->by_upstream, upstream);
    return mine != NULL ? tg_json_get(mine, tool) : NULL;
}
