# SPDX-License-Identifier: Apache-2.0
# drvshim_use_cudart(<target>)
#
# Builds a CUDA target (a CMake CUDA-language executable or shared library)
# for libdrvshim_cudart.so instead of the CUDA Runtime: compiles it as
# `nvcc -cudart none` would (CUDA_RUNTIME_LIBRARY None), links drvshim::cudart,
# and for relocatable device code (CUDA_SEPARABLE_COMPILATION ON) keeps the
# device-link step (`nvcc -dlink`, which defines the
# __cudaRegisterLinkedBinary_* functions -rdc objects call) that nvcc itself
# skips under -cudart none.
function(drvshim_use_cudart target)
  if(NOT TARGET ${target})
    message(FATAL_ERROR "drvshim_use_cudart: ${target} is not a target")
  endif()
  set_target_properties(${target} PROPERTIES CUDA_RUNTIME_LIBRARY None)
  get_target_property(separable ${target} CUDA_SEPARABLE_COMPILATION)
  if(separable)
    set_target_properties(${target} PROPERTIES CUDA_RESOLVE_DEVICE_SYMBOLS ON)
  endif()
  target_link_libraries(${target} PRIVATE drvshim::cudart)
endfunction()
