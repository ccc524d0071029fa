/*
 * vk_loader.c - the Vulkan loader opened at run time, the instance, and the device list of kiln.h.
 *
 * libvulkan.so.1 is dlopen()ed, never linked, so libkiln runs on machines without Vulkan. A test may name
 * another library (kiln__vulkan_set_test_hooks in backend.h), one that does not exist, to check the
 * fallback to the CPU. Every entry point goes through the table of vk.h.
 */
#include "backend/vulkan/vk.h"

#include "core/core.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kiln__vk_result_name(VkResult r) {
    switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default: return "VkResult error";
    }
}

kiln_status kiln__vk_fail(VkResult r, const char *what) {
    kiln_status s = r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY ? KILN_E_NOMEM
                                                                                           : KILN_E_INTERNAL;
    return kiln__error(s, "vulkan: %s failed (%s)", what, kiln__vk_result_name(r));
}

/* Open `name` and make an instance, into l. */
static kiln_status open_private(kiln_vk_loader *l, const char *name) {
    PFN_vkCreateInstance create;
    VkResult r;
    memset(l, 0, sizeof *l);
    l->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!l->lib) {
        const char *why = dlerror();
        return kiln__error(KILN_E_UNSUPPORTED, "no Vulkan loader (%s)", why ? why : name);
    }
    l->get_instance_proc = (PFN_vkGetInstanceProcAddr)dlsym(l->lib, "vkGetInstanceProcAddr");
    create =
        l->get_instance_proc ? (PFN_vkCreateInstance)l->get_instance_proc(NULL, "vkCreateInstance") : NULL;
    if (!create) {
        kiln__vk_close(l);
        return kiln__error(KILN_E_UNSUPPORTED, "the Vulkan loader %s has no vkGetInstanceProcAddr", name);
    }
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "kiln",
                             .pEngineName = "kiln",
                             .apiVersion = VK_API_VERSION_1_1};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    if ((r = create(&ci, NULL, &l->instance)) != VK_SUCCESS) {
        l->instance = VK_NULL_HANDLE;
        kiln__vk_close(l);
        return kiln__error(KILN_E_UNSUPPORTED, "no Vulkan instance: vkCreateInstance failed (%s)",
                           kiln__vk_result_name(r));
    }
#define KILN_VK_LOAD(fname)                                                                                  \
    l->fn.fname = (PFN_##fname)l->get_instance_proc(l->instance, #fname);                                    \
    if (!l->fn.fname) {                                                                                      \
        kiln__vk_close(l);                                                                                   \
        return kiln__error(KILN_E_UNSUPPORTED, "the Vulkan loader lacks %s (Vulkan 1.1 is needed)", #fname); \
    }
    KILN_VK_INSTANCE_FNS(KILN_VK_LOAD)
#undef KILN_VK_LOAD
    return KILN_OK;
}

/* The process-wide loader and instance for libvulkan.so.1, made once and never destroyed: the Vulkan loader
 * unloads its drivers when the last instance goes, and a driver such as lavapipe (with its LLVM) does not
 * unload cleanly, so every backend and the device list share this one instance and make their own
 * VkDevice from it. A loader named by the test hook gets a private instance. */
static struct {
    pthread_once_t once;
    kiln_vk_loader loader;
    kiln_status status;
    char error[256];
} shared = {.once = PTHREAD_ONCE_INIT};

static void open_shared(void) {
    shared.status = open_private(&shared.loader, "libvulkan.so.1");
    if (shared.status) snprintf(shared.error, sizeof shared.error, "%s", kiln_last_error());
    shared.loader.shared = true;
}

kiln_status kiln__vk_open(kiln_vk_loader *l) {
    const char *name = kiln__vulkan_test_hooks()->loader;
    if (name && *name && strcmp(name, "libvulkan.so.1")) return open_private(l, name);
    pthread_once(&shared.once, open_shared);
    if (shared.status) {
        memset(l, 0, sizeof *l);
        return kiln__error(shared.status, "%s", shared.error);
    }
    *l = shared.loader;
    return KILN_OK;
}

kiln_status kiln__vk_load_device(kiln_vk_loader *l, VkDevice dev) {
#define KILN_VK_LOAD(fname)                                                                                  \
    l->fn.fname = (PFN_##fname)l->fn.vkGetDeviceProcAddr(dev, #fname);                                       \
    if (!l->fn.fname) return kiln__error(KILN_E_UNSUPPORTED, "the Vulkan device lacks %s", #fname);
    KILN_VK_DEVICE_FNS(KILN_VK_LOAD)
#undef KILN_VK_LOAD
    return KILN_OK;
}

void kiln__vk_close(kiln_vk_loader *l) {
    if (l->shared) { /* the process-wide instance stays */
        memset(l, 0, sizeof *l);
        return;
    }
    if (l->instance && l->fn.vkDestroyInstance) l->fn.vkDestroyInstance(l->instance, NULL);
    if (l->instance && !l->fn.vkDestroyInstance && l->get_instance_proc) {
        PFN_vkDestroyInstance destroy =
            (PFN_vkDestroyInstance)l->get_instance_proc(l->instance, "vkDestroyInstance");
        if (destroy) destroy(l->instance, NULL);
    }
    if (l->lib) dlclose(l->lib);
    memset(l, 0, sizeof *l);
}

kiln_status kiln__vk_physical_devices(kiln_vk_loader *l, VkPhysicalDevice *out, uint32_t cap, uint32_t *n) {
    VkResult r;
    *n = cap;
    r = l->fn.vkEnumeratePhysicalDevices(l->instance, n, out);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE)
        return kiln__error(KILN_E_UNSUPPORTED, "vkEnumeratePhysicalDevices failed (%s)",
                           kiln__vk_result_name(r));
    return KILN_OK;
}

static kiln_device_type type_of(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return KILN_DEVICE_INTEGRATED_GPU;
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return KILN_DEVICE_DISCRETE_GPU;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return KILN_DEVICE_VIRTUAL_GPU;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return KILN_DEVICE_CPU;
    default: return KILN_DEVICE_OTHER;
    }
}

static bool has_extension(kiln_vk_loader *l, VkPhysicalDevice pd, const char *name) {
    VkExtensionProperties ext[256];
    uint32_t n = KILN__ARRAY_LEN(ext);
    VkResult r = l->fn.vkEnumerateDeviceExtensionProperties(pd, NULL, &n, ext);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) return false;
    for (uint32_t i = 0; i < n; i++)
        if (!strcmp(ext[i].extensionName, name)) return true;
    return false;
}

void kiln__vk_describe(kiln_vk_loader *l, VkPhysicalDevice pd, int32_t index, kiln_device_info *out) {
    VkPhysicalDeviceSubgroupProperties sub = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 props = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                         .pNext = &sub};
    VkPhysicalDeviceShaderFloat16Int8Features f16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    VkPhysicalDevice16BitStorageFeatures s16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, .pNext = &f16};
    VkPhysicalDeviceFeatures2 feats = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &s16};
    VkPhysicalDeviceMemoryProperties mem;
    memset(out, 0, sizeof *out);
    l->fn.vkGetPhysicalDeviceProperties2(pd, &props);
    l->fn.vkGetPhysicalDeviceFeatures2(pd, &feats);
    l->fn.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
    const VkPhysicalDeviceProperties *p = &props.properties;
    out->index = index;
    snprintf(out->name, sizeof out->name, "%s", p->deviceName);
    out->type = type_of(p->deviceType);
    out->vendor_id = p->vendorID;
    out->device_id = p->deviceID;
    out->api_version = p->apiVersion;
    out->n_heaps = (int32_t)KILN__MIN(mem.memoryHeapCount, 8u);
    for (int32_t i = 0; i < out->n_heaps; i++) {
        out->heap_bytes[i] = mem.memoryHeaps[i].size;
        out->heap_device_local[i] = (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
    }
    out->fp16 = f16.shaderFloat16;
    out->int8 = f16.shaderInt8;
    out->storage16 = s16.storageBuffer16BitAccess;
    out->integer_dot =
        VK_API_VERSION_MINOR(p->apiVersion) >= 3 || has_extension(l, pd, "VK_KHR_shader_integer_dot_product");
    out->subgroup_size = sub.subgroupSize;
    out->subgroup_arithmetic = sub.subgroupSize >= 1 && (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                               (sub.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT) &&
                               (sub.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    out->max_storage_buffer_range = p->limits.maxStorageBufferRange;
    out->max_shared_memory = p->limits.maxComputeSharedMemorySize;
    out->max_workgroup_invocations = p->limits.maxComputeWorkGroupInvocations;
}

/* ---- The device list of kiln.h, read once per process ---- */

#define MAX_LISTED 16

static struct {
    pthread_once_t once;
    kiln_device_info infos[MAX_LISTED];
    int32_t n;
    char note[256];
} listed = {.once = PTHREAD_ONCE_INIT};

static void read_list(void) {
    kiln_vk_loader l;
    VkPhysicalDevice pds[MAX_LISTED];
    uint32_t n = 0;
    kiln_status s = kiln__vk_open(&l);
    if (!s) s = kiln__vk_physical_devices(&l, pds, MAX_LISTED, &n);
    if (s) {
        snprintf(listed.note, sizeof listed.note, "%s", kiln_last_error());
        kiln__vk_close(&l);
        return;
    }
    for (uint32_t i = 0; i < n; i++)
        kiln__vk_describe(&l, pds[i], (int32_t)i, &listed.infos[i]);
    listed.n = (int32_t)n;
    if (n == 0) snprintf(listed.note, sizeof listed.note, "no Vulkan device");
    kiln__vk_close(&l);
}

int32_t kiln_device_count(void) {
    pthread_once(&listed.once, read_list);
    return listed.n;
}

kiln_status kiln_device_get(int32_t i, kiln_device_info *out) {
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_device_get: NULL out");
    if (i < 0 || i >= kiln_device_count())
        return kiln__error(KILN_E_RANGE, "device %d: there are %d Vulkan devices", i, kiln_device_count());
    *out = listed.infos[i];
    return KILN_OK;
}

const char *kiln_devices_note(void) {
    pthread_once(&listed.once, read_list);
    return listed.note[0] ? listed.note : NULL;
}
