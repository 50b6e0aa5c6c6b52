/* test_cli.h: what test_cli.c (the shared helpers, the run fixture and the suite) and its section
 * files test_cli_text.c, test_cli_robust.c share. */
#ifndef RC_TEST_CLI_H
#define RC_TEST_CLI_H

#include <stddef.h>
#include <check.h>

extern char g_out[1 << 16], g_err[1 << 16];
extern char g_dir[64];
extern char g_common[1024];
int run(const char *args);
int count_lines(const char *s);
int count_files(const char *dir);
char *subst_dir(char *dst, size_t n, const char *tmpl);

void text_tests_in_run(TCase *tc);
void text_tests_in_run_2(TCase *tc);
void robust_tests_in_run(TCase *tc);
void robust_tests_in_robust(TCase *tc);
void robust_tests_in_rough(TCase *tc);
void moe_tests_in_run(TCase *tc);

#endif
