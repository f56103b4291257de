"""Mipmapped and sparse CUDA arrays, execution affinity and pointer attributes that are set, natively and through
curelay (tests/gpu/run_cuda_python.sh compares the two outputs line by line).

A kernel samples a mipmapped texture at each level (tex2DLod) after every level was filled with its own value; a
sparse array gets its first tile backed by tile-pool memory through cuMemMapArrayAsync, is written and read back
through it, and is unmapped. Every call goes through ctypes on the libcuda.so.1 the process loads.
Usage: python3 cuda_python_arrays.py [ignored test_kernels.ptx path]
"""
import ctypes
import struct
import sys

libcuda = ctypes.CDLL("libcuda.so.1")
c_size = ctypes.c_size_t

# tex2DLod<float> of a texture object at x = (thread + 0.5) / 8, y = 0.5 (normalized), nvcc 13.0 for sm_90.
SAMPLE_LEVELS_PTX = b"""
.version 9.0
.target sm_90
.address_size 64
.visible .entry sample_levels(.param .u64 texture, .param .u64 out, .param .f32 lod)
{
  .reg .f32 %f<10>;
  .reg .b32 %r<2>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [texture];
  ld.param.u64 %rd2, [out];
  ld.param.f32 %f1, [lod];
  cvta.to.global.u64 %rd3, %rd2;
  mov.u32 %r1, %tid.x;
  cvt.rn.f32.s32 %f2, %r1;
  add.f32 %f3, %f2, 0f3F000000;
  mov.f32 %f4, 0f3F000000;
  mul.f32 %f5, %f3, 0f3E000000;
  tex.level.2d.v4.f32.f32 {%f6, %f7, %f8, %f9}, [%rd1, {%f5, %f4}], %f1;
  mul.wide.s32 %rd4, %r1, 4;
  add.s64 %rd5, %rd3, %rd4;
  st.global.f32 [%rd5], %f6;
  ret;
}
\0"""


class Array3DDescriptor(ctypes.Structure):
    _fields_ = [("Width", c_size), ("Height", c_size), ("Depth", c_size), ("Format", ctypes.c_int),
                ("NumChannels", ctypes.c_uint), ("Flags", ctypes.c_uint)]


class ResourceDesc(ctypes.Structure):  # CUDA_RESOURCE_DESC with the union as its first handle
    _fields_ = [("resType", ctypes.c_int), ("handle", ctypes.c_void_p), ("rest", ctypes.c_int * 30),
                ("flags", ctypes.c_uint)]


class TextureDesc(ctypes.Structure):
    _fields_ = [("addressMode", ctypes.c_int * 3), ("filterMode", ctypes.c_int), ("flags", ctypes.c_uint),
                ("maxAnisotropy", ctypes.c_uint), ("mipmapFilterMode", ctypes.c_int),
                ("mipmapLevelBias", ctypes.c_float), ("minMipmapLevelClamp", ctypes.c_float),
                ("maxMipmapLevelClamp", ctypes.c_float), ("borderColor", ctypes.c_float * 4),
                ("reserved", ctypes.c_int * 12)]


class TileExtent(ctypes.Structure):
    _fields_ = [("width", ctypes.c_uint), ("height", ctypes.c_uint), ("depth", ctypes.c_uint)]


class SparseProperties(ctypes.Structure):
    _fields_ = [("tileExtent", TileExtent), ("miptailFirstLevel", ctypes.c_uint),
                ("miptailSize", ctypes.c_ulonglong), ("flags", ctypes.c_uint), ("reserved", ctypes.c_uint * 4)]


class MemoryRequirements(ctypes.Structure):
    _fields_ = [("size", c_size), ("alignment", c_size), ("reserved", ctypes.c_uint * 4)]


class AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("locationType", ctypes.c_int),
                ("locationId", ctypes.c_int), ("win32HandleMetaData", ctypes.c_void_p),
                ("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class SparseLevel(ctypes.Structure):
    _fields_ = [("level", ctypes.c_uint), ("layer", ctypes.c_uint), ("offsetX", ctypes.c_uint),
                ("offsetY", ctypes.c_uint), ("offsetZ", ctypes.c_uint), ("extentWidth", ctypes.c_uint),
                ("extentHeight", ctypes.c_uint), ("extentDepth", ctypes.c_uint)]


class Miptail(ctypes.Structure):
    _fields_ = [("layer", ctypes.c_uint), ("offset", ctypes.c_ulonglong), ("size", ctypes.c_ulonglong)]


class Subresource(ctypes.Union):
    _fields_ = [("sparseLevel", SparseLevel), ("miptail", Miptail)]


class ArrayMapInfo(ctypes.Structure):
    _fields_ = [("resourceType", ctypes.c_int), ("resource", ctypes.c_void_p), ("subresourceType", ctypes.c_int),
                ("subresource", Subresource), ("memOperationType", ctypes.c_int), ("memHandleType", ctypes.c_int),
                ("memHandle", ctypes.c_ulonglong), ("offset", ctypes.c_ulonglong), ("deviceBitMask", ctypes.c_uint),
                ("flags", ctypes.c_uint), ("reserved", ctypes.c_uint * 2)]


class Memcpy2D(ctypes.Structure):
    _fields_ = [("srcXInBytes", c_size), ("srcY", c_size), ("srcMemoryType", ctypes.c_int),
                ("srcHost", ctypes.c_void_p), ("srcDevice", ctypes.c_ulonglong), ("srcArray", ctypes.c_void_p),
                ("srcPitch", c_size), ("dstXInBytes", c_size), ("dstY", c_size), ("dstMemoryType", ctypes.c_int),
                ("dstHost", ctypes.c_void_p), ("dstDevice", ctypes.c_ulonglong), ("dstArray", ctypes.c_void_p),
                ("dstPitch", c_size), ("WidthInBytes", c_size), ("Height", c_size)]


class ExecAffinity(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("smCount", ctypes.c_uint)]


def call(name, *args):
    return getattr(libcuda, name)(*args)


def check(name, *args):
    result = call(name, *args)
    if result != 0:
        print("FAILED", name, result)
        sys.exit(1)


CU_AD_FORMAT_FLOAT = 0x20
CU_RESOURCE_TYPE_ARRAY, CU_RESOURCE_TYPE_MIPMAPPED_ARRAY = 0, 1
CUDA_ARRAY3D_SPARSE = 0x40


def mipmapped(function, stream):
    descriptor = Array3DDescriptor(8, 8, 0, CU_AD_FORMAT_FLOAT, 1, 0)
    mipmap = ctypes.c_void_p()
    check("cuMipmappedArrayCreate", ctypes.byref(mipmap), ctypes.byref(descriptor), 4)
    levels = []
    for level in range(4):
        array = ctypes.c_void_p()
        check("cuMipmappedArrayGetLevel", ctypes.byref(array), mipmap, level)
        described = Array3DDescriptor()
        check("cuArray3DGetDescriptor_v2", ctypes.byref(described), array)
        side = 8 >> level
        values = ctypes.create_string_buffer(
            struct.pack("%df" % (side * side), *([level * 10.0 + 1.0] * (side * side))))
        copy = Memcpy2D()
        copy.srcMemoryType, copy.srcHost, copy.srcPitch = 1, ctypes.addressof(values), side * 4  # host
        copy.dstMemoryType, copy.dstArray = 3, array.value  # array
        copy.WidthInBytes, copy.Height = side * 4, side
        # The 1D copy takes one-row arrays only (the driver refuses it on the others); the 2D copy fills each level.
        print("level", level, described.Width, described.Height, described.Depth,
              "copy_1d", call("cuMemcpyHtoA_v2", array, c_size(0), values, c_size(side * side * 4)),
              "copy_2d", call("cuMemcpy2D_v2", ctypes.byref(copy)))
        levels.append(array)
    again = ctypes.c_void_p()
    check("cuMipmappedArrayGetLevel", ctypes.byref(again), mipmap, 1)
    print("same_level_twice", again.value == levels[1].value)
    print("level_past_the_end", call("cuMipmappedArrayGetLevel", ctypes.byref(again), mipmap, 4))
    print("destroy_a_level", call("cuArrayDestroy", levels[3]))
    requirements = MemoryRequirements()
    print("dense_memory_requirements",
          call("cuMipmappedArrayGetMemoryRequirements", ctypes.byref(requirements), mipmap, 0))
    properties = SparseProperties()
    print("dense_sparse_properties", call("cuMipmappedArrayGetSparseProperties", ctypes.byref(properties), mipmap))

    resource = ResourceDesc()
    resource.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY
    resource.handle = mipmap.value
    texture_desc = TextureDesc()
    texture_desc.flags = 0x02  # CU_TRSF_NORMALIZED_COORDINATES; point sampling, so each level answers its value
    texture_desc.maxMipmapLevelClamp = 3.0
    texture = ctypes.c_ulonglong()
    check("cuTexObjectCreate", ctypes.byref(texture), ctypes.byref(resource), ctypes.byref(texture_desc), None)
    surface = ctypes.c_ulonglong()
    print("surface_on_mipmapped", call("cuSurfObjectCreate", ctypes.byref(surface), ctypes.byref(resource)))
    out = ctypes.c_ulonglong()
    check("cuMemAlloc_v2", ctypes.byref(out), c_size(32))
    for lod in range(4):
        texture_arg, out_arg, lod_arg = ctypes.c_ulonglong(texture.value), ctypes.c_ulonglong(out.value), \
            ctypes.c_float(lod)
        params = (ctypes.c_void_p * 3)(ctypes.addressof(texture_arg), ctypes.addressof(out_arg),
                                       ctypes.addressof(lod_arg))
        check("cuLaunchKernel", function, 1, 1, 1, 8, 1, 1, 0, stream, params, None)
        host = ctypes.create_string_buffer(32)
        check("cuMemcpyDtoH_v2", host, out, c_size(32))
        print("sampled_lod", lod, struct.unpack("8f", host.raw))
    check("cuTexObjectDestroy", texture)
    check("cuMemFree_v2", out)
    print("mipmapped_destroy", call("cuMipmappedArrayDestroy", mipmap))


def sparse(device):
    descriptor = Array3DDescriptor(1024, 1024, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_SPARSE)
    array = ctypes.c_void_p()
    check("cuArray3DCreate_v2", ctypes.byref(array), ctypes.byref(descriptor))
    properties = SparseProperties()
    check("cuArrayGetSparseProperties", ctypes.byref(properties), array)
    extent = properties.tileExtent
    print("sparse_tile", extent.width, extent.height, extent.depth, properties.miptailFirstLevel,
          properties.miptailSize, properties.flags)
    requirements = MemoryRequirements()
    print("sparse_memory_requirements", call("cuArrayGetMemoryRequirements", ctypes.byref(requirements), array, device))
    prop = AllocationProp()
    prop.type = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
    prop.locationType = 1  # CU_MEM_LOCATION_TYPE_DEVICE
    prop.locationId = device
    prop.usage = 1  # CU_MEM_CREATE_USAGE_TILE_POOL
    granularity = c_size()
    check("cuMemGetAllocationGranularity", ctypes.byref(granularity), ctypes.byref(prop), 0)
    memory = ctypes.c_ulonglong()
    check("cuMemCreate", ctypes.byref(memory), granularity, ctypes.byref(prop), ctypes.c_ulonglong(0))
    info = ArrayMapInfo()
    info.resourceType = CU_RESOURCE_TYPE_ARRAY
    info.resource = array.value
    info.subresourceType = 0  # sparse level
    info.subresource.sparseLevel.extentWidth = extent.width
    info.subresource.sparseLevel.extentHeight = extent.height
    info.subresource.sparseLevel.extentDepth = 1
    info.memOperationType = 1  # map
    info.memHandleType = 0  # generic
    info.memHandle = memory.value
    info.deviceBitMask = 1
    print("map_tile", call("cuMemMapArrayAsync", ctypes.byref(info), 1, None),
          call("cuStreamSynchronize", None))
    values = struct.pack("8f", *[float(i) * 1.5 for i in range(8)])
    back = ctypes.create_string_buffer(32)
    print("tile_copies", call("cuMemcpyHtoA_v2", array, c_size(0), values, c_size(32)),
          call("cuMemcpyAtoH_v2", back, array, c_size(0), c_size(32)), back.raw == values)
    info.memOperationType = 2  # unmap
    info.memHandle = 0
    print("unmap_tile", call("cuMemMapArrayAsync", ctypes.byref(info), 1, None), call("cuStreamSynchronize", None))
    print("map_nothing", call("cuMemMapArrayAsync", ctypes.byref(info), 0, None))
    check("cuMemRelease", memory)
    check("cuArrayDestroy", array)


def affinity_and_pointers(device, context):
    affinity = ExecAffinity(0, 8)  # CU_EXEC_AFFINITY_TYPE_SM_COUNT
    created = ctypes.c_void_p()
    print("context_v3_affinity", call("cuCtxCreate_v3", ctypes.byref(created), ctypes.byref(affinity), 1, 0, device))
    print("context_v3_plain", call("cuCtxCreate_v3", ctypes.byref(created), None, 0, 0, device))
    if created.value:
        check("cuCtxDestroy_v2", created)
    check("cuCtxSetCurrent", context)
    memory = ctypes.c_ulonglong()
    check("cuMemAlloc_v2", ctypes.byref(memory), c_size(4096))
    on = ctypes.c_uint(1)
    value = ctypes.c_uint(7)
    print("sync_memops_set", call("cuPointerSetAttribute", ctypes.byref(on), 6, memory),
          call("cuPointerGetAttribute", ctypes.byref(value), 6, memory), value.value)
    print("context_attribute_set", call("cuPointerSetAttribute", ctypes.byref(on), 1, memory))
    check("cuMemFree_v2", memory)


def main():
    check("cuInit", 0)
    device = ctypes.c_int()
    check("cuDeviceGet", ctypes.byref(device), 0)
    context = ctypes.c_void_p()
    check("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
    check("cuCtxSetCurrent", context)
    module = ctypes.c_void_p()
    check("cuModuleLoadData", ctypes.byref(module), SAMPLE_LEVELS_PTX)
    function = ctypes.c_void_p()
    check("cuModuleGetFunction", ctypes.byref(function), module, b"sample_levels")
    mipmapped(function, None)
    sparse(device.value)
    affinity_and_pointers(device.value, context)
    check("cuModuleUnload", module)
    print("ok")


if __name__ == "__main__":
    main()
