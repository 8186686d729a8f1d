/* test_mem_device.c: `pctl mem`'s device figures (issue 12) without a GPU
 * or a daemon.
 *
 *   1. memacct: px_mem_stats carries the backend's mem_info (a fake device
 *      backend reporting fixed figures), and 0 / 0 on the CPU table, which
 *      has none.
 *   2. The proto round trip: a RankMemory with device_used_bytes /
 *      device_total_bytes packs and unpacks whole; one without them (a CPU
 *      rank, or a rank from before the fields) reads 0 / 0.
 *   3. The daemon's store of reports (memstore.c, a scratch SQLite file):
 *      what a rank reported is what GetMemory answers, and a report whose
 *      only change is the device's use is written (the store skipped it
 *      before: its de-duplication looked at the categories' peaks only).
 *   4. pctl's rendering: "-" and JSON null for a CPU rank, "used/total" GB
 *      and {"used", "total"} bytes for a device rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memacct.h"
#include "memstore.h"
#include "pctl.h"
#include "store.h"

#include "../px_check.h"

static px_status_t fake_mem_info(uint64_t *used_p, uint64_t *total_p)
{
    *used_p = 1500000000ull;
    *total_p = 80000000000ull;
    return PX_OK;
}

static void test_memacct(void)
{
    px_mem_stats_t ms;
    px_kernel_ops_t fake = *px_kernels_cpu(); /* host memory, a device's mem_info */
    fake.name = "fake-device";
    fake.mem_info = fake_mem_info;

    px_mem_set_backend(px_kernels_cpu());
    px_mem_stats(&ms);
    CHECK(ms.device_used == 0 && ms.device_total == 0, "cpu: device %llu/%llu, want 0/0",
          (unsigned long long)ms.device_used, (unsigned long long)ms.device_total);
    px_mem_set_backend(&fake);
    px_mem_stats(&ms);
    CHECK(ms.device_used == 1500000000ull && ms.device_total == 80000000000ull,
          "device: %llu/%llu", (unsigned long long)ms.device_used,
          (unsigned long long)ms.device_total);
    px_mem_set_backend(px_kernels_cpu());
}

static Parallax__V1__RankMemory *roundtrip(const Parallax__V1__RankMemory *m)
{
    size_t len = parallax__v1__rank_memory__get_packed_size(m);
    uint8_t *buf = malloc(len ? len : 1);
    parallax__v1__rank_memory__pack(m, buf);
    Parallax__V1__RankMemory *u = parallax__v1__rank_memory__unpack(NULL, len, buf);
    free(buf);
    return u;
}

static void test_proto(void)
{
    Parallax__V1__RankMemory m = PARALLAX__V1__RANK_MEMORY__INIT, *u;
    m.rank = 3;
    m.step = 7;
    m.device_used_bytes = 123456789012ull;
    m.device_total_bytes = 150000000000ull;
    u = roundtrip(&m);
    CHECK(u && u->rank == 3 && u->device_used_bytes == 123456789012ull &&
              u->device_total_bytes == 150000000000ull,
          "device fields did not round-trip");
    parallax__v1__rank_memory__free_unpacked(u, NULL);
    m.device_used_bytes = m.device_total_bytes = 0; /* a CPU rank: nothing on the wire */
    u = roundtrip(&m);
    CHECK(u && u->device_used_bytes == 0 && u->device_total_bytes == 0, "cpu rank read back "
          "device figures");
    parallax__v1__rank_memory__free_unpacked(u, NULL);
}

static void put(px_store_t *store, uint32_t rank, uint32_t step, uint64_t used, uint64_t total)
{
    Parallax__V1__MemoryCategory c = PARALLAX__V1__MEMORY_CATEGORY__INIT, *cp = &c;
    Parallax__V1__RankMemory m = PARALLAX__V1__RANK_MEMORY__INIT;
    c.name = "params";
    c.current_bytes = c.peak_bytes = 1000;
    m.rank = rank;
    m.step = step;
    m.categories = &cp;
    m.n_categories = 1;
    m.state_peak_bytes = 1000;
    m.device_used_bytes = used;
    m.device_total_bytes = total;
    CHECK(px_memstore_put(store, "job-1", &m, 0) == PX_OK, "memstore put");
}

static const Parallax__V1__RankMemory *find(const Parallax__V1__GetMemoryResponse *r,
                                            uint32_t rank)
{
    for (size_t i = 0; i < r->n_ranks; i++)
        if (r->ranks[i]->rank == rank)
            return r->ranks[i];
    return NULL;
}

static void test_store_and_format(void)
{
    char dir[] = "/tmp/px_memdev_XXXXXX", path[128], buf[32];
    px_store_t *store = NULL;
    Parallax__V1__GetMemoryResponse resp = PARALLAX__V1__GET_MEMORY_RESPONSE__INIT;

    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    snprintf(path, sizeof path, "%s/state.db", dir);
    if (px_store_open(path, &store) != PX_OK) {
        CHECK(0, "store open %s", path);
        return;
    }
    put(store, 0, 1, 0, 0);                          /* a CPU rank */
    put(store, 1, 1, 2000000000ull, 80000000000ull); /* a GPU rank */
    put(store, 1, 2, 2000000000ull, 80000000000ull);
    put(store, 1, 3, 2000000000ull, 80000000000ull);
    put(store, 1, 4, 5250000000ull, 80000000000ull); /* only the device's use changed */
    CHECK(px_memstore_get(store, "job-1", &resp) == PX_OK && resp.n_ranks == 2, "memstore get");
    const Parallax__V1__RankMemory *cpu = find(&resp, 0), *gpu = find(&resp, 1);
    CHECK(cpu && cpu->device_total_bytes == 0, "cpu rank: device total %llu",
          cpu ? (unsigned long long)cpu->device_total_bytes : 0ull);
    CHECK(gpu && gpu->step == 4 && gpu->device_used_bytes == 5250000000ull &&
              gpu->device_total_bytes == 80000000000ull,
          "gpu rank: step %u device %llu/%llu, want step 4, 5250000000/80000000000",
          gpu ? gpu->step : 0, gpu ? (unsigned long long)gpu->device_used_bytes : 0ull,
          gpu ? (unsigned long long)gpu->device_total_bytes : 0ull);

    CHECK(!strcmp(pctl_mem_device_cell(cpu, buf, sizeof buf), "-"), "cpu cell '%s'", buf);
    CHECK(!strcmp(pctl_mem_device_cell(gpu, buf, sizeof buf), "5.25/80.00"), "gpu cell '%s'",
          buf);
    json_t *j = pctl_mem_device_json(cpu);
    CHECK(json_is_null(j), "cpu json not null");
    json_decref(j);
    j = pctl_mem_device_json(gpu);
    CHECK(j && json_integer_value(json_object_get(j, "used")) == 5250000000ll &&
              json_integer_value(json_object_get(j, "total")) == 80000000000ll,
          "gpu json");
    json_decref(j);
    px_memstore_free(&resp);
    px_store_close(store);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    test_memacct();
    test_proto();
    test_store_and_format();
    if (fails)
        return 1;
    printf("mem device: memacct, proto round trip, store, pctl rendering: PASS\n");
    return 0;
}
