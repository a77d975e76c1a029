/* test_udplb_flowtab.c - the core's flow storage (src/udplb/flowtab.c) against a plain model: index lookups across growth and backward-shift deletes, per-source counters, the deadline heap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "udplb/flowtab.h"

#define MODEL_MAX 3000

typedef struct model_flow {
	bool live;
	udplb_flow_key key;
	uint32_t slot;
	uint64_t deadline;
} model_flow;

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

/* Few distinct IPs and ports, so keys collide on IP and subnet often. */
static void make_key(udplb_flow_key *k, uint32_t i)
{
	memset(k, 0, sizeof *k);
	udplb_addr_set4(&k->src, (const uint8_t[]){10, 0, (uint8_t)(i % 7), (uint8_t)(i % 13)},
	                (uint16_t)(1 + i));
	udplb_addr_set4(&k->local, (const uint8_t[]){127, 0, 0, 1}, 53);
}

static void the_table_agrees_with_a_model(void **state)
{
	(void)state;
	static model_flow model[MODEL_MAX];
	udplb_flowtab t;
	udplb_seed seed = {7, 9};
	udplb_flowtab_init(&t, &seed);
	uint32_t live = 0;
	for (int step = 0; step < 40000; step++) {
		uint32_t i = next_rand() % MODEL_MAX;
		model_flow *mf = &model[i];
		if (!mf->live) {
			if (!udplb_flowtab_reserve(&t, 2000)) {
				assert_int_equal(live, 2000);
				continue;
			}
			make_key(&mf->key, i);
			assert_int_equal(udplb_flowtab_find(&t, &mf->key), FLOWTAB_NONE);
			udplb_count_key subnet;
			udplb_count_key_subnet(&subnet, &mf->key.src, 16);
			mf->slot = udplb_flowtab_insert(&t, &mf->key, &subnet);
			mf->deadline = next_rand() % 100000;
			t.flows[mf->slot].deadline = mf->deadline;
			udplb_flowtab_heap_push(&t, mf->slot, mf->deadline);
			mf->live = true;
			live++;
		} else if (next_rand() % 3 == 0) {
			udplb_flowtab_remove(&t, mf->slot);
			mf->live = false;
			live--;
		}
		if (step % 97 == 0) {
			assert_null(udplb_flowtab_check(&t));
			uint64_t min = UINT64_MAX;
			uint32_t per_ip = 0;
			udplb_count_key ip0;
			udplb_count_key_ip(&ip0, &model[0].key.src);
			for (uint32_t j = 0; j < MODEL_MAX; j++) {
				if (!model[j].live) {
					if (model[j].key.src.family)
						assert_int_equal(udplb_flowtab_find(&t, &model[j].key),
						                 FLOWTAB_NONE);
					continue;
				}
				assert_int_equal(udplb_flowtab_find(&t, &model[j].key), model[j].slot);
				if (model[j].deadline < min)
					min = model[j].deadline;
				per_ip += udplb_addr_same_ip(&model[j].key.src, &model[0].key.src);
			}
			if (model[0].key.src.family)
				assert_int_equal(udplb_flowtab_count_get(&t, &ip0), per_ip);
			const udplb_heap_entry *top = udplb_flowtab_heap_top(&t);
			if (live)
				assert_int_equal(top->key, min);
			else
				assert_null(top);
		}
	}
	assert_int_equal(t.live, live);
	assert_true(t.cap <= 2000);
	udplb_flowtab_free(&t);
}

static void subnet_keys_mask_the_host_bits(void **state)
{
	(void)state;
	udplb_addr a, b;
	udplb_addr_set4(&a, (const uint8_t[]){192, 0, 2, 0xff}, 1);
	udplb_addr_set4(&b, (const uint8_t[]){192, 0, 3, 0x01}, 2);
	udplb_count_key ka, kb;
	udplb_count_key_subnet(&ka, &a, 23);
	udplb_count_key_subnet(&kb, &b, 23);
	assert_memory_equal(&ka, &kb, sizeof ka); /* 192.0.2.0/23 holds both */
	udplb_count_key_subnet(&kb, &b, 24);
	assert_memory_not_equal(&ka, &kb, sizeof ka);
	udplb_count_key_subnet(&ka, &a, 0);
	assert_int_equal(ka.ip[0], 0);
	udplb_count_key_subnet(&ka, &a, 200); /* clamped to 32 */
	assert_int_equal(ka.prefix, 32);
	assert_int_equal(ka.ip[3], 0xff);
	/* An IP counter and a /32 subnet counter are different keys. */
	udplb_count_key ip;
	udplb_count_key_ip(&ip, &a);
	assert_memory_not_equal(&ip, &ka, sizeof ip);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_table_agrees_with_a_model),
		cmocka_unit_test(subnet_keys_mask_the_host_bits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
