/* `tollgate policy test`: its cases file, read (core/cmd/policy_cases.c). */
#ifndef TG_CMD_POLICY_CASES_H
#define TG_CMD_POLICY_CASES_H

#include <cjson/cJSON.h>

/* FILE (YAML or JSON, at most 4 MiB) as a tree the caller deletes, or NULL with the reason on
 * stderr as "FILE: reason". */
cJSON *tg__policy_load_cases(const char *file);

#endif
