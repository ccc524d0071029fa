/*
 * vk_shaders.h - the SPIR-V of every compute shader in shaders/NAME.comp, compiled by glslc at build time and
 * embedded by cmake/vulkan.cmake (the table is generated: build/generated/vk_shaders.c).
 */
#ifndef KILN_VK_SHADERS_H
#define KILN_VK_SHADERS_H

#include <stddef.h>

typedef struct kiln_vk_shader {
    const char *name;          /* the file name without ".comp" */
    const unsigned char *code; /* SPIR-V words, 4-byte aligned */
    size_t size;               /* bytes */
} kiln_vk_shader;

extern const kiln_vk_shader kiln__vk_shaders[];
extern const int kiln__vk_n_shaders;

#endif
