/* test_config.h: what test_config.c (the fixtures and the suite) and its section files
 * test_config_rejected.c, test_config_family.c share. */
#ifndef RC_TEST_CONFIG_H
#define RC_TEST_CONFIG_H

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../models/common.h" /* the layout helpers the family files share */
#include "model.h"
#include "util.h"
#include "status.h"

#include "testutil.h"

#define CFG "cfg.json"
#define EXPECT_REJECT(json_sq, want, ...)                                                \
    do {                                                                                 \
        rc_config c_;                                                                    \
        rc_status s_ = parse((json_sq), &c_);                                            \
        expect_msg_(__FILE__, __LINE__, s_, (want), CFG, __VA_ARGS__, (char *)NULL);     \
    } while (0)

void rejected_tests_in_valid(TCase *tc);
void rejected_tests_in_valid_2(TCase *tc);
void rejected_tests_in_rejected(TCase *tc);
void rejected_tests_in_rejected_2(TCase *tc);
void family_tests_in_family_structure(TCase *tc);
void family_tests_in_family_structure_2(TCase *tc);
char *dq(const char *sq);
rc_status parse(const char *json_sq, rc_config *cfg);
void parse_ok(const char *json_sq, rc_config *cfg);
void expect_msg_(const char *file, int line, int got, int want, ...);
extern char g_dir[512];
const char *write_config(const void *bytes, size_t n);

#endif
