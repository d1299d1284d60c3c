# SPDX-License-Identifier: Apache-2.0
# An environment variable's name is checked when the code that reads it
# compiles: env::value("A_NAME_IN_THE_TABLE") compiles, a name outside the
# table does not, and the compiler says why.
#   cmake -DCXX=<compiler> -DCOMMON=<source>/common -DOUT=<dir> -P this
file(MAKE_DIRECTORY "${OUT}")
set(good "${OUT}/known_name.cpp")
set(bad "${OUT}/unknown_name.cpp")
file(WRITE "${good}" "#include \"env.hpp\"\nconst char* f() { return drvshim::detail::env::value(\"DRVSHIM_LOG\"); }\n")
file(WRITE "${bad}" "#include \"env.hpp\"\nconst char* f() { return drvshim::detail::env::value(\"DRVSHIM_LGO\"); }\n")
execute_process(COMMAND "${CXX}" -std=c++20 -fsyntax-only -I "${COMMON}" "${good}"
                RESULT_VARIABLE good_rc OUTPUT_VARIABLE good_out ERROR_VARIABLE good_out)
if(NOT good_rc EQUAL 0)
  message(FATAL_ERROR "a name in the table does not compile:\n${good_out}")
endif()
execute_process(COMMAND "${CXX}" -std=c++20 -fsyntax-only -I "${COMMON}" "${bad}"
                RESULT_VARIABLE bad_rc OUTPUT_VARIABLE bad_out ERROR_VARIABLE bad_out)
if(bad_rc EQUAL 0)
  message(FATAL_ERROR "env::value(\"DRVSHIM_LGO\") compiled: a name outside the table must not")
endif()
if(NOT bad_out MATCHES "not_in_the_table")
  message(FATAL_ERROR "env::value(\"DRVSHIM_LGO\") failed to compile without saying why:\n${bad_out}")
endif()
message(STATUS "a name outside the environment table does not compile")
