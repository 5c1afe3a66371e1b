# cmake -DSOURCE_DIR=... -DOUT=... [-DGIT=...] [-DCOMMIT=...] -P git_commit.cmake
# Writes OUT, `#define SRDMA_GIT_COMMIT "<commit>"`: COMMIT when given (a
# build from a tarball names its commit with -DSRDMA_GIT_COMMIT), else the
# checkout's HEAD, "-dirty" when tracked files differ from it, else
# "unknown". Run at every build; OUT is rewritten only when the commit
# changes, so srdma relinks only then.
if(NOT COMMIT)
  set(COMMIT "unknown (not built from a git checkout)")
  if(GIT)
    execute_process(COMMAND ${GIT} -C ${SOURCE_DIR} rev-parse --short=12 HEAD
                    OUTPUT_VARIABLE head RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(rc EQUAL 0 AND head)
      set(COMMIT ${head})
      execute_process(COMMAND ${GIT} -C ${SOURCE_DIR} status --porcelain --untracked-files=no
                      OUTPUT_VARIABLE changes RESULT_VARIABLE rc ERROR_QUIET)
      if(rc EQUAL 0 AND changes)
        string(APPEND COMMIT "-dirty")
      endif()
    endif()
  endif()
endif()
set(text "// Made by cmake/git_commit.cmake at build time: do not edit.\n#pragma once\n#define SRDMA_GIT_COMMIT \"${COMMIT}\"\n")
set(old "")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
