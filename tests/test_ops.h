/* test_ops.h: what test_ops.c (the vs-PyTorch tests and the suite) and its section file
 * test_ops_orders.c share. */
#ifndef RC_TEST_OPS_H
#define RC_TEST_OPS_H

#include <check.h>

void orders_tests_in_kernel_orders(TCase *tc);
void orders_tests_in_pair_order(TCase *tc);

#endif
