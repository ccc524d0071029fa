/*
 * vk.h - the Vulkan backend's shared internals: the loader's function table, the device, its memory
 * pool, and the backend constructor (see docs/vulkan.md).
 *
 * Nothing links libvulkan. vk_loader.c dlopen()s libvulkan.so.1 (or the library a test hook names),
 * takes vkGetInstanceProcAddr, and fills kiln_vk_fns with exactly the entry points listed below; device
 * functions come from vkGetDeviceProcAddr once a device exists. A missing loader or device is a
 * KILN_E_UNSUPPORTED status whose message says which, so the engine can fall back to the CPU.
 */
#ifndef KILN_VK_H
#define KILN_VK_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan_core.h>

#include "backend/backend.h"
#include "backend/vulkan/vk_hazard.h"

/* Every entry point the backend uses: X(name) for instance-level, D(name) for device-level. */
#define KILN_VK_INSTANCE_FNS(X)                                                                              \
    X(vkDestroyInstance)                                                                                     \
    X(vkEnumeratePhysicalDevices)                                                                            \
    X(vkGetPhysicalDeviceProperties)                                                                         \
    X(vkGetPhysicalDeviceProperties2)                                                                        \
    X(vkGetPhysicalDeviceFeatures2)                                                                          \
    X(vkGetPhysicalDeviceMemoryProperties)                                                                   \
    X(vkGetPhysicalDeviceQueueFamilyProperties)                                                              \
    X(vkEnumerateDeviceExtensionProperties)                                                                  \
    X(vkCreateDevice)                                                                                        \
    X(vkGetDeviceProcAddr)
#define KILN_VK_DEVICE_FNS(D)                                                                                \
    D(vkDestroyDevice)                                                                                       \
    D(vkGetDeviceQueue)                                                                                      \
    D(vkAllocateMemory)                                                                                      \
    D(vkFreeMemory)                                                                                          \
    D(vkMapMemory)                                                                                           \
    D(vkUnmapMemory)                                                                                         \
    D(vkCreateBuffer)                                                                                        \
    D(vkDestroyBuffer)                                                                                       \
    D(vkGetBufferMemoryRequirements)                                                                         \
    D(vkBindBufferMemory)                                                                                    \
    D(vkCreateShaderModule)                                                                                  \
    D(vkDestroyShaderModule)                                                                                 \
    D(vkCreateDescriptorSetLayout)                                                                           \
    D(vkDestroyDescriptorSetLayout)                                                                          \
    D(vkCreatePipelineLayout)                                                                                \
    D(vkDestroyPipelineLayout)                                                                               \
    D(vkCreateComputePipelines)                                                                              \
    D(vkDestroyPipeline)                                                                                     \
    D(vkCreateDescriptorPool)                                                                                \
    D(vkDestroyDescriptorPool)                                                                               \
    D(vkResetDescriptorPool)                                                                                 \
    D(vkAllocateDescriptorSets)                                                                              \
    D(vkUpdateDescriptorSets)                                                                                \
    D(vkCreateCommandPool)                                                                                   \
    D(vkDestroyCommandPool)                                                                                  \
    D(vkAllocateCommandBuffers)                                                                              \
    D(vkBeginCommandBuffer)                                                                                  \
    D(vkEndCommandBuffer)                                                                                    \
    D(vkResetCommandBuffer)                                                                                  \
    D(vkCmdBindPipeline)                                                                                     \
    D(vkCmdBindDescriptorSets)                                                                               \
    D(vkCmdPushConstants)                                                                                    \
    D(vkCmdDispatch)                                                                                         \
    D(vkCmdPipelineBarrier)                                                                                  \
    D(vkCmdCopyBuffer)                                                                                       \
    D(vkCmdFillBuffer)                                                                                       \
    D(vkCmdUpdateBuffer)                                                                                     \
    D(vkQueueSubmit)                                                                                         \
    D(vkCreateFence)                                                                                         \
    D(vkDestroyFence)                                                                                        \
    D(vkWaitForFences)                                                                                       \
    D(vkResetFences)                                                                                         \
    D(vkCreateQueryPool)                                                                                     \
    D(vkDestroyQueryPool)                                                                                    \
    D(vkCmdResetQueryPool)                                                                                   \
    D(vkCmdWriteTimestamp)                                                                                   \
    D(vkGetQueryPoolResults)

typedef struct kiln_vk_fns {
#define KILN_VK_FIELD(name) PFN_##name name;
    KILN_VK_INSTANCE_FNS(KILN_VK_FIELD)
    KILN_VK_DEVICE_FNS(KILN_VK_FIELD)
#undef KILN_VK_FIELD
} kiln_vk_fns;

/* An open loader with one instance. */
typedef struct kiln_vk_loader {
    void *lib;
    PFN_vkGetInstanceProcAddr get_instance_proc;
    VkInstance instance;
    kiln_vk_fns fn;
    bool shared; /* a copy of the process-wide loader (vk_loader.c): close leaves the instance alone */
} kiln_vk_loader;

/* The loader with an instance (Vulkan 1.1): a copy of the process-wide one, or with the loader test hook a
 * private one. KILN_E_UNSUPPORTED when there is no loader or it cannot make an instance; the message says
 * which. */
kiln_status kiln__vk_open(kiln_vk_loader *l);
void kiln__vk_close(kiln_vk_loader *l); /* a zeroed loader is a no-op */
/* The instance's physical devices: at most cap into out, their number in *n. */
kiln_status kiln__vk_physical_devices(kiln_vk_loader *l, VkPhysicalDevice *out, uint32_t cap, uint32_t *n);
/* What Kiln reports of a physical device (kiln_device_info of kiln.h). */
void kiln__vk_describe(kiln_vk_loader *l, VkPhysicalDevice pd, int32_t index, kiln_device_info *out);
/* Load the device-level entry points of dev into l->fn. */
kiln_status kiln__vk_load_device(kiln_vk_loader *l, VkDevice dev);
/* "VK_ERROR_OUT_OF_DEVICE_MEMORY" and the like. */
const char *kiln__vk_result_name(VkResult r);
/* A failed Vulkan call as a status: KILN_E_NOMEM for out of host or device memory, else KILN_E_INTERNAL, with
 * "vulkan: WHAT failed (VK_...)" as the message. */
kiln_status kiln__vk_fail(VkResult r, const char *what);

/* ---- The device: what the pool, the transfers and the kernels share ---- */

typedef struct kiln_vk_pool kiln_vk_pool;

#define KILN_VK_RING_SLOTS 2

typedef struct kiln_vk_device {
    kiln_vk_loader loader;
    kiln_vk_fns *fn; /* &loader.fn */
    VkPhysicalDevice physical;
    VkDevice device;
    VkQueue queue;
    uint32_t queue_family;
    kiln_device_info info;
    uint32_t device_type_index;  /* memory type of device buffers */
    uint32_t staging_type_index; /* host-visible, coherent */
    VkDeviceSize max_range;      /* maxStorageBufferRange */
    VkDeviceSize min_offset;     /* minStorageBufferOffsetAlignment */
    float timestamp_period;      /* nanoseconds per timestamp tick */
    uint32_t timestamp_bits;     /* the compute queue's timestampValidBits; 0: no timestamps (no profile) */
    VkCommandPool cmd_pool;
    VkCommandBuffer transfer_cmd; /* fills, device copies and downloads: submitted and waited for */
    VkFence transfer_fence;
    /* Small uploads (the graph's inputs: ids, positions, cells, mask) are not submitted on their own:
     * they are recorded here as vkCmdUpdateBuffer (which copies the bytes at once) and go to the queue
     * in front of the next submission, compute or transfer, in the same vkQueueSubmit. So a decode step
     * whose graph is one split on the device is two submissions: its inputs and kernels, then the
     * logits' download. */
    VkCommandBuffer pending_cmd;
    bool pending_open;
    size_t pending_bytes;
    int pending_slot; /* the ring slot whose upload carried pending_cmd to the queue, still maybe running;
                       * -1: none */
    uint64_t submits; /* vkQueueSubmit calls (tests count them) */
    /* The staging ring: host-visible memory that uploads and downloads pass through, KILN_VK_RING_SLOTS
     * slots of staging_size bytes each. An upload copies a piece into the next slot, submits that slot's
     * copy and goes on without waiting, so the host fills one slot while the device empties the other; a
     * slot is waited for only when the ring comes round to it again (ring_waits counts those waits). A
     * download takes a slot and waits for its copy. Every submission is ordered after the uploads before
     * it on the one queue (each slot's copy ends with a transfer-to-everything barrier), and any wait for
     * a fence also waits for everything submitted before it, so after one all slots are free. */
    VkDeviceMemory staging_mem;
    VkBuffer staging_buf;
    void *staging_map;
    VkDeviceSize staging_size; /* bytes per slot */
    struct kiln_vk_slot {
        VkCommandBuffer cmd;
        VkFence fence;
        bool busy; /* submitted and not yet waited for */
    } ring[KILN_VK_RING_SLOTS];
    uint32_t ring_next;
    uint64_t ring_waits;
    kiln_vk_pool *pool;
} kiln_vk_device;

/* ---- The memory pool (vk_memory.c) ---- */

/* A place in device memory: a pool block's VkBuffer and a byte range in it. */
typedef struct kiln_vk_span {
    VkBuffer buffer;
    VkDeviceSize offset, size;
} kiln_vk_span;

/* The pool's counters (kiln --verbose prints them; the pool test reads them). */
typedef struct kiln_vk_pool_stats {
    uint64_t device_allocs; /* vkAllocateMemory calls for blocks */
    uint64_t device_frees;  /* vkFreeMemory calls for blocks */
    uint64_t requests;      /* buffers asked of the pool */
    uint64_t reuses;        /* requests served from the freed-buffer cache */
    uint64_t evictions;     /* cached buffers released to make room (LRU) */
    uint64_t bytes_live;    /* bytes of buffers in use */
    uint64_t bytes_peak;    /* the most bytes_live has been */
    uint64_t bytes_device;  /* bytes of device memory held in blocks */
    uint64_t bytes_cached;  /* bytes of freed buffers kept for reuse */
} kiln_vk_pool_stats;

/* pooled = false: every buffer is its own vkAllocateMemory and is freed at once (the comparison the pool
 * test makes). block_bytes: the size of the blocks sub-allocated (0: 64 MiB). */
kiln_status kiln__vk_pool_create(kiln_vk_device *d, bool pooled, size_t block_bytes, kiln_vk_pool **out);
void kiln__vk_pool_destroy(kiln_vk_pool *p);
/* A buffer of at least size bytes; *addr is its opaque address (nonzero), the kiln_buffer base. */
kiln_status kiln__vk_pool_alloc(kiln_vk_pool *p, size_t size, uintptr_t *addr);
void kiln__vk_pool_free(kiln_vk_pool *p, uintptr_t addr);
/* The block and offset an address inside a live buffer names; false for an address the pool never gave. */
bool kiln__vk_pool_resolve(const kiln_vk_pool *p, uintptr_t addr, kiln_vk_span *out);
void kiln__vk_pool_stats(const kiln_vk_pool *p, kiln_vk_pool_stats *out);
/* Changes whenever a block is released (so its VkBuffer, which recordings name, is gone). */
uint64_t kiln__vk_pool_generation(const kiln_vk_pool *p);
/* Test hook: the n-th block allocation from now fails as out of device memory (0: none). */
void kiln__vk_pool_fail_after(kiln_vk_pool *p, int32_t n);

/* ---- Transfers through the staging ring (vk_device.c) ---- */

/* kiln__vk_upload returns once src has been copied into the ring: the device may still be copying it into
 * dst, and whatever is submitted afterwards sees the bytes. */

kiln_status kiln__vk_upload(kiln_vk_device *d, kiln_vk_span dst, const void *src, size_t size);
kiln_status kiln__vk_download(kiln_vk_device *d, kiln_vk_span src, void *dst, size_t size);
kiln_status kiln__vk_fill(kiln_vk_device *d, kiln_vk_span dst, int value, size_t size);
kiln_status kiln__vk_copy(kiln_vk_device *d, kiln_vk_span src, kiln_vk_span dst, size_t size);

/* Open device `index` of the instance (-1: the first discrete or integrated GPU, never a CPU device;
 * KILN_E_UNSUPPORTED when there is none) with its queue, staging ring and pool. */
kiln_status kiln__vk_device_create(int32_t index, bool pooled, kiln_vk_device **out);
void kiln__vk_device_destroy(kiln_vk_device *d);
/* Submit one recorded command buffer and wait for it (and so for everything submitted before it). */
kiln_status kiln__vk_submit_wait(kiln_vk_device *d, VkCommandBuffer cmd, VkFence fence);
/* Wait for the uploads still in flight; before memory they write is released. */
kiln_status kiln__vk_drain(kiln_vk_device *d);

/* ---- The backend (vk_backend.c) ---- */

/* Options of a Vulkan backend ("vulkan", "vulkan:N", "auto"). */
typedef struct kiln_vk_options {
    int32_t device;       /* index among the instance's devices; -1: a GPU (auto) */
    bool pooled;          /* the memory pool (false only for the pool's own test) */
    kiln_op refuse;       /* an op to refuse (test hook for forced fallbacks); KILN_OP_NONE: none */
    bool portable_reduce; /* shared-memory reductions despite subgroup arithmetic (test hook) */
} kiln_vk_options;

kiln_status kiln__backend_vulkan_create_ex(const kiln_vk_options *o, kiln_backend **out);
/* The pool's counters of a Vulkan backend (zeros for another backend). */
void kiln__backend_vulkan_pool_stats(const kiln_backend *b, kiln_vk_pool_stats *out);

kiln_vk_pool *kiln__backend_vulkan_pool(kiln_backend *b);

#endif

/* ---- The backend's context, shared by vk_backend.c (buffers, weights, compute) and vk_ops.c (kernels) ----
 */

/* The largest fixed workgroup of Kiln's shaders (mul_mm, quantize_q8, rope, unary: 256 invocations); a device
 * whose maxComputeWorkGroupInvocations is smaller (Vulkan guarantees 128; desktop GPUs and lavapipe have
 * 1024) is not used. norm.comp's size is chosen per device (KILN_VK_NORM_GPU, at most the device's). */
#define KILN_VK_MIN_INVOCATIONS 256u
#define KILN_VK_NORM_GPU 512u
#define KILN_VK_NORM_CPU 128u
/* The weight and table types matmul and get_rows read: one pipeline each. */
#define KILN_VK_WEIGHT_TYPES 6
/* The KV cache types attention and cache_write read and write: 0 F32, 1 F16, 2 Q8_0, one pipeline each. */
#define KILN_VK_KV_TYPES 3

enum {
    KILN_VK_PIPE_BINARY,
    KILN_VK_PIPE_UNARY,
    KILN_VK_PIPE_NORM,
    KILN_VK_PIPE_SOFTMAX,
    KILN_VK_PIPE_ROPE,
    KILN_VK_PIPE_ATTENTION, /* + the KV type index (the specialization constant) */
    KILN_VK_PIPE_CACHE_WRITE = KILN_VK_PIPE_ATTENTION + KILN_VK_KV_TYPES, /* likewise */
    KILN_VK_PIPE_CAST = KILN_VK_PIPE_CACHE_WRITE + KILN_VK_KV_TYPES,       /* likewise, to F32 */
    KILN_VK_PIPE_QUANTIZE = KILN_VK_PIPE_CAST + KILN_VK_KV_TYPES, /* activations to q8 rows in the scratch */
    KILN_VK_PIPE_ATTENTION_COMBINE, /* a split attention's parts (in the scratch) merged */
    KILN_VK_PIPE_ATTENTION_TILE,    /* + the KV type index: attention tiled over 16 queries (prefill) */
    /* + 0 F32, 1 F16, 2 Q8_0, 3 Q4_0, 4 Q4_K, 5 Q6_K (the specialization constant) */
    KILN_VK_PIPE_MUL_MV = KILN_VK_PIPE_ATTENTION_TILE + KILN_VK_KV_TYPES,
    KILN_VK_PIPE_MUL_MM = KILN_VK_PIPE_MUL_MV + KILN_VK_WEIGHT_TYPES,   /* likewise, tiled */
    KILN_VK_PIPE_GET_ROWS = KILN_VK_PIPE_MUL_MM + KILN_VK_WEIGHT_TYPES, /* likewise */
    KILN_VK_PIPE_COUNT = KILN_VK_PIPE_GET_ROWS + KILN_VK_WEIGHT_TYPES,
};

/* A weight uploaded once, found again by identity: its host bytes, type and shape. */
typedef struct kiln_vk_weight {
    const void *src;
    kiln_type type;
    int64_t ne[KILN_MAX_DIMS];
    size_t bytes;
    uintptr_t addr; /* its pool buffer */
} kiln_vk_weight;

/* A recorded command buffer for one node range, replayed while the range's key (every recorded op, shape,
 * stride, parameter and data address, and the pool's generation) stays the same. */
typedef struct kiln_vk_recording {
    VkCommandBuffer cmd;          /* VK_NULL_HANDLE: a slot never used */
    VkDescriptorPool *desc_pools; /* each holds DESC_SETS sets; reset when the slot is recorded again */
    int32_t n_desc_pools, used_desc_pools, sets_in_pool;
    unsigned char *key;
    size_t key_len, key_cap;
    uint64_t last_used;
    bool valid;
    /* Recorded while profiling (vk_profile.c): a timestamp at the start and after each dispatch, stamp i's
     * kernel in stamp_pipe[i]; n_stamps 0 when recorded without. */
    VkQueryPool queries;
    uint32_t n_stamps;
    uint16_t *stamp_pipe;
} kiln_vk_recording;

#define KILN_VK_RECORDINGS 64

typedef struct kiln_vk_rope_table {
    float base;
    int32_t n_rot;
    uintptr_t addr; /* [n_rot / 2] floats */
} kiln_vk_rope_table;

/* Where a kernel reads or writes a tensor: a storage-buffer binding at an offset aligned to the device's
 * minStorageBufferOffsetAlignment, and the bytes from there to the tensor's first byte. */
typedef struct kiln_vk_bind {
    VkBuffer buffer; /* VK_NULL_HANDLE: unused (a placeholder is bound) */
    VkDeviceSize offset, range;
    uint32_t rem;
} kiln_vk_bind;

typedef struct kiln_vk_ctx {
    kiln_vk_device *dev;
    kiln_vk_options opt;
    VkDescriptorSetLayout set_layout;
    VkPipelineLayout layout;
    VkPipeline pipes[KILN_VK_PIPE_COUNT];
    bool subgroup; /* matmul, norm and softmax from their NAME_subgroup modules (shaders/reduce.glsl) */
    kiln_vk_recording recs[KILN_VK_RECORDINGS];
    kiln_vk_recording *rec; /* the one being recorded */
    unsigned char *key;     /* the key of the range being computed (grows only) */
    size_t key_len, key_cap;
    uint64_t clock, n_recorded, n_replayed;
    uint64_t n_dispatches, n_barriers; /* recorded so far (tests count them) */
    kiln_vk_hazards hazards;           /* of the range being recorded, since its last barrier */
    VkFence fence;
    kiln_vk_weight *weights;
    int32_t n_weights, cap_weights;
    uint64_t weight_bytes;
    /* The scratch buffer: a quantized matmul's activations as q8 rows (quantize_q8.comp), or a split
     * attention's parts (attention.comp, attention_combine.comp), reused by every node of every
     * recording (a dispatch that writes it waits for the ones that read it). Sized before a range is
     * recorded (kiln__vk_scratch_bytes); growing it invalidates every recording, which names the old
     * buffer. */
    uintptr_t scratch;
    size_t scratch_bytes;
    /* The q8 rows last written to the scratch by quantize_q8 while recording, so that the next quantized
     * matmul of the same activation (the Q and the KV projections of one norm's output) reads them rather
     * than quantizing again: the source's binding, shape and strides, the rows' layout (span 32 or 256) and
     * their binding. Dropped when a recording starts and by any dispatch that writes the source's or the
     * scratch's bytes (kiln__vk_dispatch). */
    struct kiln_vk_q8_rows {
        bool valid;
        VkBuffer src_buffer, rows_buffer;
        VkDeviceSize src_lo, src_hi, rows_lo, rows_hi;
        uint32_t span;
        int64_t ne[KILN_MAX_DIMS];
        size_t nb[KILN_MAX_DIMS];
        uint32_t rem;
        kiln_vk_bind rows;
    } q8;
    uint64_t n_q8_reused; /* quantizes skipped for that (tests count them) */
    /* Rope's frequency tables (kiln__rope_freq of each pair), one per (base, n_rot) seen, each uploaded
     * once into a buffer of its own that lives as long as the backend. */
    kiln_vk_rope_table *rope_tables;
    int32_t n_rope_tables;
    char description[352]; /* "vulkan:0 (llvmpipe ..., subgroup reductions)" */
    /* The kernel profile (vk_profile.c, kiln_model_profile): on or off (a key byte of every recording), and
     * its counters. */
    bool profiling;
    struct kiln_vk_profile {
        uint64_t calls[KILN_VK_PIPE_COUNT], ns[KILN_VK_PIPE_COUNT];
        uint64_t computes, recorded, record_ns, submit_ns, unattributed;
        uint64_t *stamps; /* KILN_VK_STAMPS results read back */
    } prof;
} kiln_vk_ctx;

/* The binding of bytes [start, start + bytes) of t's data (a weight leaf is uploaded on first use). */
kiln_status kiln__vk_bind_range(kiln_vk_ctx *c, const kiln_tensor *t, size_t start, size_t bytes,
                                kiln_vk_bind *out);
/* The binding of t's whole span. */
kiln_status kiln__vk_bind(kiln_vk_ctx *c, const kiln_tensor *t, kiln_vk_bind *out);
/* Storage buffers per dispatch: bindings 0-2 are sources, 3 the destination, 4 a fourth source (the
 * attention mask). An unused one is bound to the destination. */
#define KILN_VK_BINDINGS 5
/* Record one dispatch of pipeline pipe over groups workgroups (a 2D grid when more than 65535) times gz,
 * with bindings b[0..4] and push constants, followed by a barrier before the next. */
kiln_status kiln__vk_dispatch(kiln_vk_ctx *c, int pipe, const kiln_vk_bind b[KILN_VK_BINDINGS],
                              const void *push, uint32_t push_size, uint64_t groups, uint32_t gz);

/* vk_profile.c: the kernel profile. Timestamps a recording holds at most (its first, then one per
 * dispatch; dispatches past it are counted as unattributed). */
#define KILN_VK_STAMPS 4096
/* While profiling: give rec a query pool (once), reset it and write the first timestamp; rec->n_stamps 0
 * otherwise. Called right after vkBeginCommandBuffer. */
kiln_status kiln__vk_profile_begin(kiln_vk_ctx *c, kiln_vk_recording *rec);
/* After a dispatch of pipeline pipe in the recording being made: its timestamp. */
void kiln__vk_profile_mark(kiln_vk_ctx *c, int pipe);
/* After rec's submission has finished: its timestamps read and added to the kernels' rows. */
kiln_status kiln__vk_profile_collect(kiln_vk_ctx *c, const kiln_vk_recording *rec);
/* The backend verbs (backend.h's profile and profile_read). */
kiln_status kiln__vk_profile_set(kiln_backend *b, bool on);
void kiln__vk_profile_read(const kiln_backend *b, kiln_device_profile *out);

/* vk_ops.c: which nodes the device runs (exact types and layouts), and recording one of them. */
bool kiln__vk_supports(const kiln_vk_ctx *c, const kiln_tensor *node);
/* Whether a KV cache of this type and size may live on the device: F32, F16 or Q8_0 rows, each layer's cache
 * within one binding, and neither cache_write nor attention refused. */
bool kiln__vk_holds_kv(const kiln_vk_ctx *c, kiln_type type, size_t row_bytes, int64_t n_cells);
kiln_status kiln__vk_record(kiln_vk_ctx *c, const kiln_tensor *node);
/* Whether the device has the shared memory of attention_tile.comp (whose pipelines exist only then). */
bool kiln__vk_attention_tiles(const kiln_vk_device *dev);
/* The scratch bytes recording this node needs (0: none). */
size_t kiln__vk_scratch_bytes(const kiln_vk_ctx *c, const kiln_tensor *node);
/* The binding of the first `bytes` of the scratch buffer (sized by the recording's caller). */
kiln_status kiln__vk_bind_scratch(kiln_vk_ctx *c, size_t bytes, kiln_vk_bind *out);
/* The binding of `bytes` bytes at pool address addr (a backend-owned buffer). */
kiln_status kiln__vk_bind_addr(kiln_vk_ctx *c, uintptr_t addr, size_t bytes, kiln_vk_bind *out);
