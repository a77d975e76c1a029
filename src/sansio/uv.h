/* uv.h - stands in for libuv's header on the include path of the sans-io cores (sansio_libs in src/meson.build), so that including it there stops the build. */
#error "a sans-io core must not use libuv: the shell passes time in and does the I/O (ARCHITECTURE.md section 2, principle 1)"
