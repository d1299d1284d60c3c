# SPDX-License-Identifier: Apache-2.0
# Fails when the library exports any cu*/nvrtc* symbol: drvshim must never
# interpose on the driver or NVRTC for other code in the process.
execute_process(COMMAND nm -D --defined-only "${LIB}" OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm failed on ${LIB}")
endif()
string(REGEX MATCHALL "[^\n]* [TtWwDdBbRrVv] (cu|nvrtc)[A-Za-z0-9_]*" bad "${symbols}")
if(bad)
  message(FATAL_ERROR "libdrvshim exports driver/NVRTC symbols:\n${bad}")
endif()
string(REGEX MATCHALL "\n[0-9a-f]+ [TW] [^\n]*" exported "${symbols}")
list(LENGTH exported n)
if(n EQUAL 0)
  message(FATAL_ERROR "nm found no exported functions in ${LIB}: the check would prove nothing")
endif()
message(STATUS "export check: ${n} exported functions, none named cu*/nvrtc*")
