/*
 * vk_memory.c - device memory for the Vulkan backend: large blocks from vkAllocateMemory, sub-allocated,
 * and a cache of freed buffers in size buckets with LRU eviction (see vk.h and docs/vulkan.md).
 *
 * A block is one VkDeviceMemory with one VkBuffer over all of it; buffers are ranges of a block found
 * first-fit in its sorted free list (neighbours coalesce on release). A request of more than half a block
 * gets a block of its own. A freed buffer is not released at once: it goes to the cache, and a later
 * request whose power-of-two size bucket is the same and which it can hold takes it back without touching
 * the free lists (a "reuse"). The cache holds at most CACHE_LIMIT bytes; beyond that the least recently
 * freed buffers are released (an "eviction"), and a block left empty by a release is freed. When a block
 * cannot be allocated the whole cache is released and the allocation is tried once more.
 *
 * Addresses: a buffer's opaque address (the kiln_buffer base) is ADDR_TAG | (block + 1) << ADDR_SHIFT |
 * offset, so a tensor's data = base + offset resolves to a block and a byte offset in O(1), and a host
 * pointer (below 2^47) never resolves.
 */
#include "backend/vulkan/vk.h"

#include "core/core.h"

#include <string.h>

#define ADDR_SHIFT 40
#define ADDR_MASK (((uintptr_t)1 << ADDR_SHIFT) - 1)
#define ADDR_TAG ((uintptr_t)1 << 62) /* above every user-space pointer: a host address never resolves */
#define MAX_BLOCKS (((uintptr_t)1 << (62 - ADDR_SHIFT)) - 1)

_Static_assert(sizeof(uintptr_t) == 8, "the pool's addresses need 64-bit pointers");
#define BLOCK_BYTES ((size_t)64 << 20)
#define CACHE_LIMIT ((uint64_t)256 << 20)
#define GRAIN 256 /* sizes and offsets inside a block are multiples of this */

typedef struct vk_range {
    VkDeviceSize offset, size;
} vk_range;

typedef struct vk_block {
    VkDeviceMemory mem; /* VK_NULL_HANDLE: a free slot */
    VkBuffer buf;
    VkDeviceSize size, used;
    vk_range *free; /* sorted by offset, never adjacent */
    int32_t n_free, cap_free;
} vk_block;

typedef struct vk_entry {
    uintptr_t addr;
    VkDeviceSize size;
    uint64_t stamp; /* cache: when it was freed */
} vk_entry;

struct kiln_vk_pool {
    kiln_vk_device *dev;
    bool pooled;
    size_t block_bytes;
    vk_block *blocks;
    int32_t n_blocks, cap_blocks;
    vk_entry *live, *cache;
    int32_t n_live, cap_live, n_cache, cap_cache;
    uint64_t clock;
    int32_t fail_after;
    uint64_t generation; /* blocks released so far */
    kiln_vk_pool_stats st;
};

static void *grow(void *arr, int32_t *cap, int32_t need, size_t elem) {
    int32_t n = *cap ? *cap : 8;
    void *p;
    if (need <= *cap) return arr;
    while (n < need)
        n *= 2;
    if (!(p = kiln__realloc_array(arr, (size_t)n, elem))) return NULL;
    *cap = n;
    return p;
}

static int bucket(VkDeviceSize size) {
    int b = 0;
    while (((VkDeviceSize)1 << b) < size)
        b++;
    return b;
}

static void block_release_memory(kiln_vk_pool *p, vk_block *b) {
    kiln_vk_fns *fn = p->dev->fn;
    /* An upload still in flight may write into it; on a lost device there is nothing left to wait for. */
    (void)kiln__vk_drain(p->dev);
    if (b->buf) fn->vkDestroyBuffer(p->dev->device, b->buf, NULL);
    p->generation++;
    if (b->mem) {
        fn->vkFreeMemory(p->dev->device, b->mem, NULL);
        p->st.device_frees++;
        p->st.bytes_device -= b->size;
    }
    kiln__dealloc(b->free);
    memset(b, 0, sizeof *b);
}

/* A new block of `size` bytes in a free slot; its index in *out. */
static kiln_status block_new(kiln_vk_pool *p, VkDeviceSize size, int32_t *out) {
    kiln_vk_device *d = p->dev;
    VkMemoryRequirements req;
    VkResult r;
    int32_t i;
    vk_block *b;
    for (i = 0; i < p->n_blocks && p->blocks[i].mem; i++) {
    }
    if (i == p->n_blocks) {
        vk_block *nb = grow(p->blocks, &p->cap_blocks, p->n_blocks + 1, sizeof *nb);
        if (!nb) return kiln__nomem("the Vulkan pool's blocks");
        p->blocks = nb;
        memset(&p->blocks[p->n_blocks++], 0, sizeof *nb);
    }
    if ((uintptr_t)i + 1 > MAX_BLOCKS) return kiln__error(KILN_E_RANGE, "vulkan pool: too many blocks");
    b = &p->blocks[i];
    if (p->fail_after > 0 && --p->fail_after == 0)
        return kiln__error(KILN_E_NOMEM, "vulkan: vkAllocateMemory of %llu bytes failed (injected by a test)",
                           (unsigned long long)size);
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .size = size,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    if ((r = d->fn->vkCreateBuffer(d->device, &bi, NULL, &b->buf)))
        return kiln__error(KILN_E_NOMEM, "vulkan: vkCreateBuffer of %llu bytes failed (%s)",
                           (unsigned long long)size, kiln__vk_result_name(r));
    d->fn->vkGetBufferMemoryRequirements(d->device, b->buf, &req);
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = req.size,
                               .memoryTypeIndex = d->device_type_index};
    if ((r = d->fn->vkAllocateMemory(d->device, &ai, NULL, &b->mem))) {
        b->mem = VK_NULL_HANDLE;
        block_release_memory(p, b);
        return kiln__error(KILN_E_NOMEM, "vulkan: vkAllocateMemory of %llu bytes failed (%s)",
                           (unsigned long long)req.size, kiln__vk_result_name(r));
    }
    p->st.device_allocs++;
    p->st.bytes_device += size;
    b->size = size;
    if ((r = d->fn->vkBindBufferMemory(d->device, b->buf, b->mem, 0))) {
        block_release_memory(p, b);
        return kiln__error(KILN_E_INTERNAL, "vulkan: vkBindBufferMemory failed (%s)",
                           kiln__vk_result_name(r));
    }
    if (!(b->free = kiln__alloc(sizeof *b->free))) {
        block_release_memory(p, b);
        return kiln__nomem("the Vulkan pool's free list");
    }
    b->free[0] = (vk_range){0, size};
    b->n_free = b->cap_free = 1;
    *out = i;
    return KILN_OK;
}

/* First fit of size bytes in block b: its offset, or false. */
static bool block_take(vk_block *b, VkDeviceSize size, VkDeviceSize *offset) {
    for (int32_t i = 0; i < b->n_free; i++) {
        if (b->free[i].size < size) continue;
        *offset = b->free[i].offset;
        b->free[i].offset += size;
        b->free[i].size -= size;
        if (b->free[i].size == 0) {
            memmove(&b->free[i], &b->free[i + 1], (size_t)(b->n_free - i - 1) * sizeof *b->free);
            b->n_free--;
        }
        b->used += size;
        return true;
    }
    return false;
}

/* Give [offset, offset + size) back to block b's free list; frees the block when it is left empty. */
static void block_give(kiln_vk_pool *p, int32_t bi, VkDeviceSize offset, VkDeviceSize size) {
    vk_block *b = &p->blocks[bi];
    int32_t i = 0;
    while (i < b->n_free && b->free[i].offset < offset)
        i++;
    bool left = i > 0 && b->free[i - 1].offset + b->free[i - 1].size == offset;
    bool right = i < b->n_free && offset + size == b->free[i].offset;
    b->used -= size;
    if (left && right) {
        b->free[i - 1].size += size + b->free[i].size;
        memmove(&b->free[i], &b->free[i + 1], (size_t)(b->n_free - i - 1) * sizeof *b->free);
        b->n_free--;
    } else if (left) {
        b->free[i - 1].size += size;
    } else if (right) {
        b->free[i].offset = offset;
        b->free[i].size += size;
    } else {
        vk_range *f = grow(b->free, &b->cap_free, b->n_free + 1, sizeof *f);
        if (!f) return; /* the range is lost to this block until it is freed whole; never a wrong answer */
        b->free = f;
        memmove(&b->free[i + 1], &b->free[i], (size_t)(b->n_free - i) * sizeof *b->free);
        b->free[i] = (vk_range){offset, size};
        b->n_free++;
    }
    if (b->used == 0) block_release_memory(p, b);
}

static void release(kiln_vk_pool *p, uintptr_t addr, VkDeviceSize size) {
    block_give(p, (int32_t)(((addr & ~ADDR_TAG) >> ADDR_SHIFT) - 1), addr & ADDR_MASK, size);
}

/* Release cached buffers, least recently freed first, until the cache holds at most limit bytes. */
static void evict(kiln_vk_pool *p, uint64_t limit) {
    while (p->st.bytes_cached > limit && p->n_cache > 0) {
        int32_t lru = 0;
        for (int32_t i = 1; i < p->n_cache; i++)
            if (p->cache[i].stamp < p->cache[lru].stamp) lru = i;
        vk_entry e = p->cache[lru];
        p->cache[lru] = p->cache[--p->n_cache];
        p->st.bytes_cached -= e.size;
        p->st.evictions++;
        release(p, e.addr, e.size);
    }
}

kiln_status kiln__vk_pool_create(kiln_vk_device *d, bool pooled, size_t block_bytes, kiln_vk_pool **out) {
    kiln_vk_pool *p = kiln__calloc(1, sizeof *p);
    *out = NULL;
    if (!p) return kiln__nomem("the Vulkan memory pool");
    p->dev = d;
    p->pooled = pooled;
    p->block_bytes = block_bytes ? block_bytes : BLOCK_BYTES;
    *out = p;
    return KILN_OK;
}

void kiln__vk_pool_destroy(kiln_vk_pool *p) {
    if (!p) return;
    for (int32_t i = 0; i < p->n_blocks; i++)
        if (p->blocks[i].mem) block_release_memory(p, &p->blocks[i]);
    kiln__dealloc(p->blocks);
    kiln__dealloc(p->live);
    kiln__dealloc(p->cache);
    kiln__dealloc(p);
}

/* A fresh range of size bytes from the blocks (a new block when none has room). */
static kiln_status carve(kiln_vk_pool *p, VkDeviceSize size, uintptr_t *addr) {
    VkDeviceSize offset = 0;
    int32_t bi = -1;
    kiln_status s;
    bool shared = p->pooled && size <= p->block_bytes / 2;
    for (int32_t i = 0; shared && i < p->n_blocks && bi < 0; i++)
        if (p->blocks[i].mem && p->blocks[i].size == p->block_bytes &&
            block_take(&p->blocks[i], size, &offset))
            bi = i;
    if (bi < 0) {
        if ((s = block_new(p, shared ? p->block_bytes : size, &bi))) {
            if (s != KILN_E_NOMEM || p->n_cache == 0) return s;
            evict(p, 0); /* out of memory: give the whole cache back and try once more */
            if ((s = block_new(p, shared ? p->block_bytes : size, &bi))) return s;
        }
        block_take(&p->blocks[bi], size, &offset);
    }
    *addr = ADDR_TAG | ((uintptr_t)(bi + 1) << ADDR_SHIFT) | (uintptr_t)offset;
    return KILN_OK;
}

kiln_status kiln__vk_pool_alloc(kiln_vk_pool *p, size_t request, uintptr_t *addr) {
    VkDeviceSize size = ((VkDeviceSize)(request ? request : 1) + GRAIN - 1) / GRAIN * GRAIN;
    vk_entry *live;
    kiln_status s;
    int32_t hit = -1;
    *addr = 0;
    if ((uint64_t)request > ((uint64_t)ADDR_MASK >> 1))
        return kiln__error(KILN_E_RANGE, "vulkan: a %zu-byte buffer is larger than the pool's blocks",
                           request);
    if (!(live = grow(p->live, &p->cap_live, p->n_live + 1, sizeof *live)))
        return kiln__nomem("the Vulkan pool's buffer list");
    p->live = live;
    p->st.requests++;
    for (int32_t i = 0; i < p->n_cache; i++)
        if (p->cache[i].size >= size && bucket(p->cache[i].size) == bucket(size) &&
            (hit < 0 || p->cache[i].size < p->cache[hit].size))
            hit = i;
    if (hit >= 0) {
        vk_entry e = p->cache[hit];
        p->cache[hit] = p->cache[--p->n_cache];
        p->st.bytes_cached -= e.size;
        p->st.reuses++;
        *addr = e.addr;
        size = e.size;
    } else if ((s = carve(p, size, addr))) {
        return s;
    }
    p->live[p->n_live++] = (vk_entry){*addr, size, 0};
    p->st.bytes_live += size;
    p->st.bytes_peak = KILN__MAX(p->st.bytes_peak, p->st.bytes_live);
    return KILN_OK;
}

void kiln__vk_pool_free(kiln_vk_pool *p, uintptr_t addr) {
    int32_t i;
    vk_entry e, *cache;
    for (i = 0; i < p->n_live && p->live[i].addr != addr; i++) {
    }
    if (i == p->n_live) return; /* not a live buffer: a programmer error the wrappers never make */
    e = p->live[i];
    p->live[i] = p->live[--p->n_live];
    p->st.bytes_live -= e.size;
    if (!p->pooled || !(cache = grow(p->cache, &p->cap_cache, p->n_cache + 1, sizeof *cache))) {
        release(p, e.addr, e.size);
        return;
    }
    p->cache = cache;
    e.stamp = ++p->clock;
    p->cache[p->n_cache++] = e;
    p->st.bytes_cached += e.size;
    evict(p, CACHE_LIMIT);
}

bool kiln__vk_pool_resolve(const kiln_vk_pool *p, uintptr_t addr, kiln_vk_span *out) {
    uintptr_t hi = (addr & ~ADDR_TAG) >> ADDR_SHIFT;
    const vk_block *b;
    if (!(addr & ADDR_TAG) || hi == 0 || hi > (uintptr_t)p->n_blocks) return false;
    b = &p->blocks[hi - 1];
    if (!b->mem || (addr & ADDR_MASK) >= b->size) return false;
    out->buffer = b->buf;
    out->offset = addr & ADDR_MASK;
    out->size = b->size - out->offset;
    return true;
}

void kiln__vk_pool_stats(const kiln_vk_pool *p, kiln_vk_pool_stats *out) {
    *out = p->st;
}

void kiln__vk_pool_fail_after(kiln_vk_pool *p, int32_t n) {
    p->fail_after = n;
}

uint64_t kiln__vk_pool_generation(const kiln_vk_pool *p) {
    return p->generation;
}
