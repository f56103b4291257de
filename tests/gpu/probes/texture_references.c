/* GPU-host probe: texture and surface references (deprecated; issue 14), run natively and through curelay with
 * tests/gpu/run_probe_compare.sh. A PTX module declares two texture references and a surface reference; the probe
 * prints what every setter and getter answers (a fresh reference's defaults included), the refusals, and what
 * kernels read through the references: linear memory (cuTexRefSetAddress), pitched memory (cuTexRefSetAddress2D,
 * both ABI forms), a CUDA array (cuTexRefSetArray) with point and linear filtering, and what a kernel writes
 * through the surface reference into an array. One line per question: NAME result [values].
 * Build: gcc -O1 -o texture_references texture_references.c -I/usr/local/cuda/include \
 *          -L/usr/local/cuda/lib64/stubs -lcuda -ldl
 */
#define _GNU_SOURCE
#define CUDA_ENABLE_DEPRECATED 1
#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static const char kPtx[] =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    ".global .texref tex_lin;\n"
    ".global .texref tex_arr;\n"
    ".global .surfref surf_out;\n"
    /* out[i] = tex1Dfetch(tex_lin, i).x */
    ".visible .entry fetch_linear(.param .u64 out, .param .u32 n)\n"
    "{\n"
    "  .reg .b32 %r<4>; .reg .f32 %f<5>; .reg .b64 %rd<4>; .reg .pred %p;\n"
    "  mov.u32 %r1, %tid.x; ld.param.u32 %r2, [n]; setp.ge.u32 %p, %r1, %r2; @%p bra done;\n"
    "  tex.1d.v4.f32.s32 {%f1, %f2, %f3, %f4}, [tex_lin, {%r1}];\n"
    "  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1; mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd1, %rd2;\n"
    "  st.global.f32 [%rd3], %f1;\n"
    "done:\n"
    "  ret;\n"
    "}\n"
    /* out[y*w+x] = tex2D(tex_arr, x + dx, y + 0.5).x, one thread per texel */
    ".visible .entry fetch_2d(.param .u64 out, .param .u32 w, .param .f32 dx)\n"
    "{\n"
    "  .reg .b32 %r<8>; .reg .f32 %f<8>; .reg .b64 %rd<4>;\n"
    "  mov.u32 %r1, %tid.x; mov.u32 %r2, %tid.y; ld.param.u32 %r3, [w]; ld.param.f32 %f6, [dx];\n"
    "  cvt.rn.f32.u32 %f1, %r1; add.f32 %f1, %f1, %f6; cvt.rn.f32.u32 %f2, %r2; add.f32 %f2, %f2, 0f3F000000;\n"
    "  tex.2d.v4.f32.f32 {%f3, %f4, %f5, %f7}, [tex_arr, {%f1, %f2}];\n"
    "  mad.lo.u32 %r4, %r2, %r3, %r1;\n"
    "  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1; mul.wide.u32 %rd2, %r4, 4; add.s64 %rd3, %rd1, %rd2;\n"
    "  st.global.f32 [%rd3], %f3;\n"
    "  ret;\n"
    "}\n"
    /* surf2Dwrite(x * 100 + y, surf_out, x * 4, y) for one thread per element */
    ".visible .entry write_surface()\n"
    "{\n"
    "  .reg .b32 %r<8>;\n"
    "  mov.u32 %r1, %tid.x; mov.u32 %r2, %tid.y; mul.lo.u32 %r3, %r1, 100; add.u32 %r3, %r3, %r2;\n"
    "  shl.b32 %r4, %r1, 2;\n"
    "  sust.b.2d.b32.trap [surf_out, {%r4, %r2}], {%r3};\n"
    "  ret;\n"
    "}\n";

#define ANSWER(name, call) printf("%s %d\n", name, (int)(call))

static double Sum(const float* values, int count) {
  double sum = 0;
  for (int i = 0; i < count; ++i) sum += values[i] * (i % 7 + 1);
  return sum;
}

static CUresult Launch(CUfunction f, unsigned bx, unsigned by, void** args) {
  CUresult r = cuLaunchKernel(f, 1, 1, 1, bx, by, 1, 0, NULL, args, NULL);
  if (r != CUDA_SUCCESS) return r;
  return cuCtxSynchronize();
}

static void Defaults(const char* which, CUtexref texref) {
  CUarray_format format = 0;
  int channels = -1, anisotropy = -1;
  CUaddress_mode mode0 = 99, mode1 = 99, mode2 = 99;
  CUfilter_mode filter = 99, mipmap_filter = 99;
  unsigned int flags = 99;
  float bias = -1, min_clamp = -1, max_clamp = -1, border[4] = {-1, -1, -1, -1};
  CUresult r = cuTexRefGetFormat(&format, &channels, texref);
  printf("%s_get_format %d %d %d\n", which, (int)r, (int)format, channels);
  r = cuTexRefGetAddressMode(&mode0, texref, 0);
  printf("%s_get_address_mode0 %d %d\n", which, (int)r, (int)mode0);
  r = cuTexRefGetAddressMode(&mode1, texref, 1);
  printf("%s_get_address_mode1 %d %d\n", which, (int)r, (int)mode1);
  r = cuTexRefGetAddressMode(&mode2, texref, 2);
  printf("%s_get_address_mode2 %d %d\n", which, (int)r, (int)mode2);
  r = cuTexRefGetFilterMode(&filter, texref);
  printf("%s_get_filter %d %d\n", which, (int)r, (int)filter);
  r = cuTexRefGetMipmapFilterMode(&mipmap_filter, texref);
  printf("%s_get_mipmap_filter %d %d\n", which, (int)r, (int)mipmap_filter);
  r = cuTexRefGetFlags(&flags, texref);
  printf("%s_get_flags %d %u\n", which, (int)r, flags);
  r = cuTexRefGetMaxAnisotropy(&anisotropy, texref);
  printf("%s_get_max_anisotropy %d %d\n", which, (int)r, anisotropy);
  r = cuTexRefGetMipmapLevelBias(&bias, texref);
  printf("%s_get_level_bias %d %g\n", which, (int)r, bias);
  r = cuTexRefGetMipmapLevelClamp(&min_clamp, &max_clamp, texref);
  printf("%s_get_level_clamp %d %g %g\n", which, (int)r, min_clamp, max_clamp);
  r = cuTexRefGetBorderColor(border, texref);
  printf("%s_get_border %d %g %g %g %g\n", which, (int)r, border[0], border[1], border[2], border[3]);
  CUdeviceptr address = 0;
  r = cuTexRefGetAddress(&address, texref);
  printf("%s_get_address_unbound %d %s\n", which, (int)r, address == 0 ? "null" : "set");
  CUarray array = NULL;
  r = cuTexRefGetArray(&array, texref);
  printf("%s_get_array_unbound %d %s\n", which, (int)r, array == NULL ? "null" : "set");
  CUmipmappedArray mipmap = NULL;
  r = cuTexRefGetMipmappedArray(&mipmap, texref);
  printf("%s_get_mipmapped_unbound %d %s\n", which, (int)r, mipmap == NULL ? "null" : "set");
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0); /* every line out before a crash of the driver's */
  ANSWER("cuInit", cuInit(0));
  CUdevice device;
  CUcontext context;
  cuDeviceGet(&device, 0);
  ANSWER("retain", cuDevicePrimaryCtxRetain(&context, device));
  cuCtxSetCurrent(context);
  CUmodule module;
  ANSWER("load", cuModuleLoadData(&module, kPtx));
  CUtexref tex_lin = NULL, tex_arr = NULL, again = NULL, missing = NULL;
  CUsurfref surf_out = NULL, not_surface = NULL;
  ANSWER("get_tex_lin", cuModuleGetTexRef(&tex_lin, module, "tex_lin"));
  CUresult r = cuModuleGetTexRef(&again, module, "tex_lin");
  printf("get_tex_lin_again %d %s\n", (int)r, again == tex_lin ? "same" : "other");
  ANSWER("get_tex_arr", cuModuleGetTexRef(&tex_arr, module, "tex_arr"));
  ANSWER("get_tex_missing", cuModuleGetTexRef(&missing, module, "nope"));
  ANSWER("get_tex_of_surface", cuModuleGetTexRef(&missing, module, "surf_out"));
  ANSWER("get_surf", cuModuleGetSurfRef(&surf_out, module, "surf_out"));
  ANSWER("get_surf_of_texture", cuModuleGetSurfRef(&not_surface, module, "tex_lin"));
  Defaults("module_ref", tex_lin);

  /* Linear memory: 256 floats, read by tex1Dfetch. */
  enum { kCount = 256 };
  float host[kCount], back[kCount];
  for (int i = 0; i < kCount; ++i) host[i] = (float)(i * 3 + 1);
  CUdeviceptr memory = 0, out = 0;
  cuMemAlloc(&memory, 64 * 1024);
  cuMemAlloc(&out, 64 * 1024);
  cuMemcpyHtoD(memory, host, sizeof host);
  size_t offset = 99;
  r = cuTexRefSetAddress(&offset, tex_lin, memory, sizeof host);
  printf("set_address %d offset %zu\n", (int)r, offset);
  r = cuTexRefSetAddress(&offset, tex_lin, memory + 4, sizeof host - 4);
  printf("set_address_unaligned %d offset %zu\n", (int)r, offset);
  r = cuTexRefSetAddress(&offset, tex_lin, memory, sizeof host);
  CUdeviceptr bound = 0;
  r = cuTexRefGetAddress(&bound, tex_lin);
  printf("get_address %d %s\n", (int)r, bound == memory ? "same" : "other");
  ANSWER("set_format_bad", cuTexRefSetFormat(tex_lin, (CUarray_format)0x77, 1));
  CUarray_format format_answer = 0;
  r = cuTexRefGetFormat(&format_answer, NULL, tex_lin);
  printf("get_format_bad %d %d\n", (int)r, (int)format_answer);
  ANSWER("set_format_3_channels", cuTexRefSetFormat(tex_lin, CU_AD_FORMAT_FLOAT, 3));
  ANSWER("set_format_float1", cuTexRefSetFormat(tex_lin, CU_AD_FORMAT_FLOAT, 1));
  CUfunction fetch_linear, fetch_2d, write_surface;
  ANSWER("get_fetch_linear", cuModuleGetFunction(&fetch_linear, module, "fetch_linear"));
  ANSWER("get_fetch_2d", cuModuleGetFunction(&fetch_2d, module, "fetch_2d"));
  ANSWER("get_write_surface", cuModuleGetFunction(&write_surface, module, "write_surface"));
  ANSWER("param_set_tex_ref", cuParamSetTexRef(fetch_linear, CU_PARAM_TR_DEFAULT, tex_lin));
  ANSWER("param_set_tex_ref_unit0", cuParamSetTexRef(fetch_linear, 0, tex_lin));
  unsigned n = kCount;
  void* linear_args[] = {&out, &n};
  memset(back, 0, sizeof back);
  r = Launch(fetch_linear, kCount, 1, linear_args);
  cuMemcpyDtoH(back, out, sizeof back);
  printf("fetch_linear %d first %g last %g sum %.1f\n", (int)r, back[0], back[kCount - 1], Sum(back, kCount));
  Defaults("linear_bound", tex_lin);

  /* Pitched memory: 16 x 8 floats, pitch 256 bytes, read by fetch_2d through tex_arr. */
  enum { kW = 16, kH = 8 };
  float grid[kH][64];
  for (int y = 0; y < kH; ++y)
    for (int x = 0; x < 64; ++x) grid[y][x] = (float)(y * 1000 + x);
  cuMemcpyHtoD(memory, grid, sizeof grid);
  CUDA_ARRAY_DESCRIPTOR pitched = {kW, kH, CU_AD_FORMAT_FLOAT, 1};
  ANSWER("set_address_2d", cuTexRefSetAddress2D(tex_arr, &pitched, memory, 256));
  ANSWER("set_address_2d_bad_pitch", cuTexRefSetAddress2D(tex_arr, &pitched, memory, 100));
  ANSWER("set_address_2d_null", cuTexRefSetAddress2D(tex_arr, NULL, memory, 256));
  ANSWER("set_address_2d_again", cuTexRefSetAddress2D(tex_arr, &pitched, memory, 256));
  float dx = 0.5f;
  void* args_2d[] = {&out, &n, &dx};
  unsigned w = kW;
  args_2d[1] = &w;
  memset(back, 0, sizeof back);
  r = Launch(fetch_2d, kW, kH, args_2d);
  cuMemcpyDtoH(back, out, kW * kH * sizeof(float));
  printf("fetch_pitched %d first %g last %g sum %.1f\n", (int)r, back[0], back[kW * kH - 1], Sum(back, kW * kH));
  typedef CUresult (*SetAddress2D)(CUtexref, const CUDA_ARRAY_DESCRIPTOR*, CUdeviceptr, size_t);
  SetAddress2D v2 = (SetAddress2D)dlsym(RTLD_DEFAULT, "cuTexRefSetAddress2D_v2");
  printf("has_set_address_2d_v2 %d\n", v2 != NULL);
  if (v2 != NULL) {
    CUDA_ARRAY_DESCRIPTOR narrower = {kW / 2, kH, CU_AD_FORMAT_FLOAT, 1};
    ANSWER("set_address_2d_v2", v2(tex_arr, &narrower, memory + 256, 256));
    ANSWER("set_address_2d_v2_bad_pitch", v2(tex_arr, &narrower, memory, 100));
    ANSWER("set_address_2d_v2_null", v2(tex_arr, NULL, memory, 256));
    ANSWER("set_address_2d_v2_again", v2(tex_arr, &narrower, memory + 256, 256));
    memset(back, 0, sizeof back);
    r = Launch(fetch_2d, kW, kH, args_2d);
    cuMemcpyDtoH(back, out, kW * kH * sizeof(float));
    printf("fetch_pitched_v2 %d first %g sum %.1f\n", (int)r, back[0], Sum(back, kW * kH));
  }

  /* A CUDA array of 16 x 8 floats, point then linear filtering, clamped. */
  CUarray array = NULL, answered = NULL;
  CUDA_ARRAY_DESCRIPTOR flat = {kW, kH, CU_AD_FORMAT_FLOAT, 1};
  ANSWER("array_create", cuArrayCreate(&array, &flat));
  CUDA_MEMCPY2D copy;
  memset(&copy, 0, sizeof copy);
  copy.srcMemoryType = CU_MEMORYTYPE_HOST;
  copy.srcHost = grid;
  copy.srcPitch = 64 * sizeof(float);
  copy.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  copy.dstArray = array;
  copy.WidthInBytes = kW * sizeof(float);
  copy.Height = kH;
  ANSWER("array_fill", cuMemcpy2D(&copy));
  ANSWER("set_array_flags0", cuTexRefSetArray(tex_arr, array, 0));
  ANSWER("set_array", cuTexRefSetArray(tex_arr, array, CU_TRSA_OVERRIDE_FORMAT));
  r = cuTexRefGetArray(&answered, tex_arr);
  printf("get_array %d %s\n", (int)r, answered == array ? "same" : "other");
  r = cuTexRefGetAddress(&bound, tex_arr);
  printf("get_address_of_array_bound %d\n", (int)r);
  ANSWER("set_address_mode0_clamp", cuTexRefSetAddressMode(tex_arr, 0, CU_TR_ADDRESS_MODE_CLAMP));
  ANSWER("set_address_mode1_clamp", cuTexRefSetAddressMode(tex_arr, 1, CU_TR_ADDRESS_MODE_CLAMP));
  ANSWER("set_address_mode3", cuTexRefSetAddressMode(tex_arr, 3, CU_TR_ADDRESS_MODE_CLAMP));
  ANSWER("set_address_mode_bad", cuTexRefSetAddressMode(tex_arr, 0, (CUaddress_mode)9));
  CUaddress_mode mode_answer = 99;
  r = cuTexRefGetAddressMode(&mode_answer, tex_arr, 0);
  printf("get_address_mode_bad %d %d\n", (int)r, (int)mode_answer);
  ANSWER("set_address_mode0_clamp_again", cuTexRefSetAddressMode(tex_arr, 0, CU_TR_ADDRESS_MODE_CLAMP));
  ANSWER("set_filter_point", cuTexRefSetFilterMode(tex_arr, CU_TR_FILTER_MODE_POINT));
  memset(back, 0, sizeof back);
  r = Launch(fetch_2d, kW, kH, args_2d);
  cuMemcpyDtoH(back, out, kW * kH * sizeof(float));
  printf("fetch_array_point %d first %g last %g sum %.1f\n", (int)r, back[0], back[kW * kH - 1], Sum(back, kW * kH));
  ANSWER("set_filter_bad", cuTexRefSetFilterMode(tex_arr, (CUfilter_mode)5));
  CUfilter_mode filter_answer = 99;
  r = cuTexRefGetFilterMode(&filter_answer, tex_arr);
  printf("get_filter_bad %d %d\n", (int)r, (int)filter_answer);
  ANSWER("set_filter_linear", cuTexRefSetFilterMode(tex_arr, CU_TR_FILTER_MODE_LINEAR));
  dx = 1.0f; /* halfway between texels */
  memset(back, 0, sizeof back);
  r = Launch(fetch_2d, kW, kH, args_2d);
  cuMemcpyDtoH(back, out, kW * kH * sizeof(float));
  printf("fetch_array_linear %d first %g last %g sum %.1f\n", (int)r, back[0], back[kW * kH - 1], Sum(back, kW * kH));
  ANSWER("set_mipmap_filter", cuTexRefSetMipmapFilterMode(tex_arr, CU_TR_FILTER_MODE_LINEAR));
  ANSWER("set_level_bias", cuTexRefSetMipmapLevelBias(tex_arr, 0.5f));
  ANSWER("set_level_clamp", cuTexRefSetMipmapLevelClamp(tex_arr, 1.0f, 3.5f));
  ANSWER("set_max_anisotropy", cuTexRefSetMaxAnisotropy(tex_arr, 8));
  ANSWER("set_max_anisotropy_big", cuTexRefSetMaxAnisotropy(tex_arr, 100));
  float border[4] = {0.25f, 0.5f, 0.75f, 1.0f};
  ANSWER("set_border", cuTexRefSetBorderColor(tex_arr, border));
  ANSWER("set_flags", cuTexRefSetFlags(tex_arr, CU_TRSF_NORMALIZED_COORDINATES));
  ANSWER("set_flags_unknown", cuTexRefSetFlags(tex_arr, 0x100));
  Defaults("array_bound", tex_arr);

  /* A mipmapped array bound to tex_arr. */
  CUmipmappedArray mipmap = NULL, answered_mipmap = NULL;
  CUDA_ARRAY3D_DESCRIPTOR levels;
  memset(&levels, 0, sizeof levels);
  levels.Width = 32;
  levels.Height = 32;
  levels.Format = CU_AD_FORMAT_FLOAT;
  levels.NumChannels = 1;
  ANSWER("mipmap_create", cuMipmappedArrayCreate(&mipmap, &levels, 3));
  ANSWER("set_mipmapped", cuTexRefSetMipmappedArray(tex_arr, mipmap, CU_TRSA_OVERRIDE_FORMAT));
  r = cuTexRefGetMipmappedArray(&answered_mipmap, tex_arr);
  printf("get_mipmapped %d %s\n", (int)r, answered_mipmap == mipmap ? "same" : "other");
  r = cuTexRefGetArray(&answered, tex_arr);
  printf("get_array_of_mipmap_bound %d\n", (int)r);

  /* The surface reference: a kernel writes an array through it. */
  CUarray surface_array = NULL, surface_answered = NULL;
  CUDA_ARRAY3D_DESCRIPTOR surface_desc;
  memset(&surface_desc, 0, sizeof surface_desc);
  surface_desc.Width = kW;
  surface_desc.Height = kH;
  surface_desc.Format = CU_AD_FORMAT_UNSIGNED_INT32;
  surface_desc.NumChannels = 1;
  surface_desc.Flags = CUDA_ARRAY3D_SURFACE_LDST;
  ANSWER("surface_array_create", cuArray3DCreate(&surface_array, &surface_desc));
  r = cuSurfRefGetArray(&surface_answered, surf_out);
  printf("surf_get_array_unbound %d\n", (int)r);
  ANSWER("surf_set_array_plain", cuSurfRefSetArray(surf_out, array, 0));
  ANSWER("surf_set_array_flags1", cuSurfRefSetArray(surf_out, surface_array, 1));
  ANSWER("surf_set_array", cuSurfRefSetArray(surf_out, surface_array, 0));
  r = cuSurfRefGetArray(&surface_answered, surf_out);
  printf("surf_get_array %d %s\n", (int)r, surface_answered == surface_array ? "same" : "other");
  r = Launch(write_surface, kW, kH, NULL);
  unsigned written[kW * kH];
  memset(written, 0, sizeof written);
  memset(&copy, 0, sizeof copy);
  copy.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  copy.srcArray = surface_array;
  copy.dstMemoryType = CU_MEMORYTYPE_HOST;
  copy.dstHost = written;
  copy.dstPitch = kW * sizeof(unsigned);
  copy.WidthInBytes = kW * sizeof(unsigned);
  copy.Height = kH;
  CUresult copied = cuMemcpy2D(&copy);
  unsigned long long surface_sum = 0;
  for (int i = 0; i < kW * kH; ++i) surface_sum += (unsigned long long)written[i] * (i % 5 + 1);
  printf("write_surface %d copy %d at(3,2) %u sum %llu\n", (int)r, (int)copied, written[2 * kW + 3], surface_sum);

  /* A created reference. */
  CUtexref created = NULL;
  ANSWER("create", cuTexRefCreate(&created));
  Defaults("created", created);
  ANSWER("created_set_filter", cuTexRefSetFilterMode(created, CU_TR_FILTER_MODE_LINEAR));
  CUfilter_mode filter = 99;
  r = cuTexRefGetFilterMode(&filter, created);
  printf("created_get_filter %d %d\n", (int)r, (int)filter);
  ANSWER("created_set_array", cuTexRefSetArray(created, array, CU_TRSA_OVERRIDE_FORMAT));
  ANSWER("destroy_created", cuTexRefDestroy(created));

  /* A module's reference looked up while another context is current belongs to the module's context. */
  CUcontext other = NULL;
  ANSWER("other_context_create", cuCtxCreate(&other, NULL, 0, device));
  CUtexref elsewhere = NULL;
  r = cuModuleGetTexRef(&elsewhere, module, "tex_arr");
  printf("other_context_get_tex_arr %d %s\n", (int)r, elsewhere == tex_arr ? "same" : "other");
  ANSWER("other_context_destroy", cuCtxDestroy(other));
  cuCtxSetCurrent(context);
  ANSWER("after_other_context_set_filter", cuTexRefSetFilterMode(tex_arr, CU_TR_FILTER_MODE_POINT));

  /* No current context: setters and getters are answered. */
  cuCtxSetCurrent(NULL);
  ANSWER("no_context_set_filter", cuTexRefSetFilterMode(tex_lin, CU_TR_FILTER_MODE_LINEAR));
  filter = 99;
  r = cuTexRefGetFilterMode(&filter, tex_lin);
  printf("no_context_get_filter %d %d\n", (int)r, (int)filter);
  ANSWER("get_format_both_null", cuTexRefGetFormat(NULL, NULL, tex_lin));
  cuCtxSetCurrent(context);

  /* A module's reference destroyed: the module then finds no reference of that name. */
  ANSWER("destroy_module_ref", cuTexRefDestroy(tex_lin));
  ANSWER("get_destroyed_module_ref", cuModuleGetTexRef(&again, module, "tex_lin"));

  ANSWER("mipmap_destroy", cuMipmappedArrayDestroy(mipmap));
  ANSWER("surface_array_destroy", cuArrayDestroy(surface_array));
  ANSWER("array_destroy", cuArrayDestroy(array));
  ANSWER("unload", cuModuleUnload(module));
  cuMemFree(memory);
  cuMemFree(out);
  return 0;
}
