// Linked into the benchmarks in AddressSanitizer builds (bench/CMakeLists.txt): LeakSanitizer
// reads these suppressions at start-up. tcmalloc registers its MallocExtension once per
// process with operator new and never frees it, on purpose; that is not a leak of ours.
extern "C" const char* __lsan_default_suppressions();

extern "C" const char* __lsan_default_suppressions() { return "leak:MallocExtension::Register\n"; }
