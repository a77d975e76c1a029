/* ossl.c - opens libssl (and through it libcrypto) on OpenSSL's first use and fills the table ossl.h calls through. */
#define ETM_OSSL_NO_MACROS
#include "crypto/ossl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"

/* The library the build compiled against: meson passes its SONAME,
 * libssl.so.3 for OpenSSL 3. */
#ifndef ETM_LIBSSL_SONAME
#define ETM_LIBSSL_SONAME "libssl.so.3"
#endif

enum { M_OPEN, M_SYMBOL, M_FATAL, M_COUNT_ };
static const char *const msgs[M_COUNT_] = {
	[M_OPEN] = "cannot load %s: %s",
	[M_SYMBOL] = "%s has no %s: %s",
	[M_FATAL] = "OpenSSL is needed and cannot be loaded: %s",
};

etm_ossl_table etm_ossl_tab;
atomic_bool etm_ossl_ready;

const char *etm_ossl_soname = ETM_LIBSSL_SONAME;

static pthread_once_t once = PTHREAD_ONCE_INIT;

int etm_ossl_open(const char *soname, etm_ossl_table *t, char *err, size_t err_size)
{
	(void)dlerror();
	void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *why = dlerror();
		snprintf(err, err_size, msgs[M_OPEN], soname, why ? why : "?");
		return -1;
	}
	/* dlsym on libssl's handle also searches what it depends on: libcrypto. */
#define ETM_OSSL_RESOLVE(f)                                                                       \
	if (!(*(void **)&t->f = dlsym(h, #f))) {                                                  \
		const char *why = dlerror();                                                      \
		snprintf(err, err_size, msgs[M_SYMBOL], soname, #f, why ? why : "?");             \
		(void)dlclose(h);                                                                 \
		return -1;                                                                        \
	}
	ETM_OSSL_FUNCS(ETM_OSSL_RESOLVE)
#undef ETM_OSSL_RESOLVE
	return 0; /* open for the life of the process */
}

static void load_once(void)
{
	char err[512];
	if (etm_ossl_open(etm_ossl_soname, &etm_ossl_tab, err, sizeof err) < 0) {
		/* Any thread may be first: nothing can go on without the
		 * library, and exit(3) would run atexit handlers beside the
		 * other threads. */
		log_error("crypto", msgs[M_FATAL], err);
		_exit(1);
	}
	atomic_store_explicit(&etm_ossl_ready, true, memory_order_release);
}

const etm_ossl_table *etm_ossl_load(void)
{
	pthread_once(&once, load_once);
	return &etm_ossl_tab;
}

bool etm_ossl_loaded(void) { return atomic_load_explicit(&etm_ossl_ready, memory_order_acquire); }
