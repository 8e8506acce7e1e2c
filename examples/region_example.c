/* The README's region example, whole: 1 GiB of ordinary memory of which at most 64 MiB stays
 * decompressed; every page written, then read back through faults. Where userfaultfd is not
 * available (a container without it, vm.unprivileged_userfaultfd=0 for a user), it says why
 * and exits 0: the region cannot exist there. */
#include <zsm/region.h>

#include <errno.h>
#include <stdio.h>

int main(void)
{
	struct zsm_region_options opts = {.budget_bytes = 64 << 20}; /* at most 64 MiB decompressed */
	struct zsm_region *r = zsm_region_create(1ul << 30, &opts);
	if (r == NULL) {
		int unavailable = errno == EPERM || errno == ENOSYS;
		fprintf(stderr, "region example: %s\n", zsm_region_last_error());
		return unavailable ? 0 : 1;
	}
	char *p = zsm_region_base(r); /* cold pages are compressed; a touch brings them back */
	const size_t pages = (1ul << 30) / 4096;
	for (size_t i = 0; i < pages; i += 16) /* 256 MiB written: four times the budget */
		p[i * 4096 + i % 4096] = (char)(i * 7 + 1);
	size_t wrong = 0;
	for (size_t i = 0; i < pages; i += 16)
		wrong += p[i * 4096 + i % 4096] != (char)(i * 7 + 1);
	struct zsm_region_stats s;
	zsm_region_stats(r, &s);
	printf("region example: %zu wrong, %llu faults, %llu evictions, resident %llu of %llu bytes\n",
	       wrong, (unsigned long long)s.faults, (unsigned long long)s.evictions,
	       (unsigned long long)s.resident_bytes, (unsigned long long)s.budget_bytes);
	zsm_region_destroy(r);
	return wrong == 0 ? 0 : 1;
}
