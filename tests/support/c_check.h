/* tests/support/c_check.h: the check of the C tests whose main() stops at the first failure:
 * CHECK(cond) prints the file, line and condition to stderr and returns 1 from the function. */
#ifndef ZSM_TESTS_C_CHECK_H
#define ZSM_TESTS_C_CHECK_H

#include <stdio.h>

#define CHECK(cond)                                                                \
	do {                                                                       \
		if (!(cond)) {                                                     \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); \
			return 1;                                                  \
		}                                                                  \
	} while (0)

#endif
