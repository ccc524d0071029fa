/*
 * cmd_devices.c - `kiln devices`: the compute devices Kiln can run on: the CPU (always, the fallback)
 * and each Vulkan device with what the Vulkan backend uses of it (docs/vulkan.md).
 */
#include "common.h"

#include <stdio.h>
#include <string.h>

static const char devices_help[] =
    "usage: kiln devices [-h]\n"
    "\n"
    "List the compute devices: the CPU (always present; it runs whatever a device cannot) and each Vulkan\n"
    "device, numbered as --device vulkan:N names them, with its type, memory heaps and the features Kiln\n"
    "uses (fp16, int8, integer dot product, subgroup size and arithmetic, hence which variant of the\n"
    "matmul/norm/softmax reductions it runs, the largest storage-buffer binding, shared memory).\n"
    "`--device auto` picks the first discrete, else integrated, GPU and never a CPU device such as\n"
    "lavapipe. When Kiln was built without Vulkan, or no loader or device is present, the list says why.\n"
    "\n"
    "  -h, --help   this text\n";

static void print_device(const kiln_device_info *d) {
    printf("vulkan:%d  %s (%s), Vulkan %u.%u.%u\n", d->index, d->name, kiln_device_type_name(d->type),
           (d->api_version >> 22) & 0x7f, (d->api_version >> 12) & 0x3ff, d->api_version & 0xfff);
    for (int32_t h = 0; h < d->n_heaps; h++)
        printf("    heap %d: %.1f MiB%s\n", h, (double)d->heap_bytes[h] / (1024.0 * 1024.0),
               d->heap_device_local[h] ? " (device local)" : "");
    printf("    fp16 %s, int8 %s, 16-bit storage %s, integer dot product %s\n", d->fp16 ? "yes" : "no",
           d->int8 ? "yes" : "no", d->storage16 ? "yes" : "no", d->integer_dot ? "yes" : "no");
    printf("    subgroup size %u, arithmetic %s: %s reductions\n", d->subgroup_size,
           d->subgroup_arithmetic ? "yes" : "no", d->subgroup_arithmetic ? "subgroup" : "shared-memory");
    printf("    max storage buffer range %.1f MiB, shared memory %u KiB, workgroup %u\n",
           (double)d->max_storage_buffer_range / (1024.0 * 1024.0), d->max_shared_memory / 1024,
           d->max_workgroup_invocations);
    printf("    auto: %s\n", d->type == KILN_DEVICE_DISCRETE_GPU || d->type == KILN_DEVICE_INTEGRATED_GPU
                                 ? "eligible"
                                 : "not picked (not a GPU); use --device vulkan:N");
}

int cmd_devices(int argc, char **argv) {
    int32_t n;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(devices_help, stdout);
            return CLI_OK;
        }
        return cli_usage_error("devices", "unknown argument '%s'", argv[i]);
    }
    printf("cpu       the CPU, kernel level %s (always last: the fallback)\n", kiln_get_cpu_level());
    n = kiln_device_count();
    for (int32_t i = 0; i < n; i++) {
        kiln_device_info d;
        if (kiln_device_get(i, &d) == KILN_OK) print_device(&d);
    }
    if (n == 0)
        printf("vulkan    none: %s\n", kiln_devices_note() ? kiln_devices_note() : "no Vulkan device");
    return CLI_OK;
}
