// Sanitizer options every harness starts with (linked into each; ASAN_OPTIONS set at run time still override them).
//
// intercept_tls_get_addr=0: up to LLVM 16 (Debian 12 ships clang 14), the sanitizer runtime's __tls_get_addr
// interceptor takes a block of dynamic TLS that happens to start 16 bytes into a page for the header of glibc before
// 2.25 and records the two words before it as the block's range. glibc 2.36 has no such header, so now and then (a
// malloc placement) LeakSanitizer's tracer scans a made-up range, faults ("Tracer caught signal 11") and dies, which
// libFuzzer files as a crash of an empty input (docs/fuzzing.md, session 43). Without the interceptor, what dynamic TLS
// points to is still reached through the heap: glibc allocates the blocks, and each thread's vector of them, with
// malloc, and LeakSanitizer follows that vector from the thread's control block (a leak-free run checks it).
extern "C" const char* __asan_default_options() { return "intercept_tls_get_addr=0"; }
