/* The region's C API from C11: the header compiles as C, a region round-trips a page through
 * eviction, bad input is -EINVAL. Exit 77 (skipped) when userfaultfd is not available. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <zsm/region.h>

#include "c_check.h"

int main(void)
{
	struct zsm_region_options opts;
	memset(&opts, 0, sizeof(opts));
	opts.budget_bytes = 16 * 4096;
	struct zsm_region *r = zsm_region_create(64 * 4096, &opts);
	if (r == NULL) {
		printf("skipped: %s\n", zsm_region_last_error());
		return 77;
	}
	unsigned char *base = zsm_region_base(r);
	for (int p = 0; p < 64; p++)
		memset(base + p * 4096, p + 1, 4096);
	CHECK(zsm_region_evict(r, base, 64 * 4096) == 0);
	struct zsm_region_stats s;
	CHECK(zsm_region_stats(r, &s) == 0);
	CHECK(s.resident_bytes == 0);
	CHECK(s.same_pages == 64);
	for (int p = 0; p < 64; p++)
		CHECK(base[p * 4096 + 4095] == (unsigned char)(p + 1));
	CHECK(zsm_region_evict(r, base + 64 * 4096, 1) == -EINVAL);
	CHECK(zsm_region_pin(NULL, base, 1) == -EINVAL);
	CHECK(zsm_region_size(r) == 64 * 4096);
	zsm_region_destroy(r);
	opts.budget_bytes = 1;
	errno = 0;
	CHECK(zsm_region_create(64 * 4096, &opts) == NULL && errno == EINVAL);
	CHECK(strstr(zsm_region_last_error(), "budget_bytes") != NULL);
	return 0;
}
