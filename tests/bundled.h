/* The bundled model and its default prompts as test fixtures (test_ratio,
 * test_trace): loaded once per test case into g_model / g_prompts. Include
 * after testutil.h. */
#ifndef RC_TEST_BUNDLED_H
#define RC_TEST_BUNDLED_H

#include "model.h"
#include "prompts.h"

static rc_model *g_model;
static rc_prompts g_prompts;

static void load(void)
{
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/models/pythia-rc-tiny");
    ck_assert_msg(rc_model_load(p, &g_model) == RC_OK, "%s", rc_last_error());
    rc_test_source_path(p, sizeof p, "data/prompts/default.ids");
    ck_assert_msg(rc_prompts_load_ids(p, &g_prompts) == RC_OK, "%s", rc_last_error());
}

static void unload(void)
{
    rc_model_free(g_model);
    rc_prompts_free(&g_prompts);
}

#endif
