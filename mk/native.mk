# Native-core checks under sanitizers and valgrind; `include mk/native.mk`
# from the top Makefile (paths are relative to the project root).
#
#   make asan      rebuild the cffi module with -fsanitize=address,undefined in
#                  a temp dir and run tests/test_native_*.py against it
#   make valgrind  run tests/test_native_*.py once under valgrind (memcheck)
#
# Both fail on the first sanitizer/memcheck error. ASan must be the first DSO
# loaded, so Python runs with LD_PRELOAD of gcc's libasan; leak checking is off
# because CPython itself keeps memory alive at exit; -P keeps the source
# tree's cpstore/ off sys.path so the sanitized copy is the one imported.
# CPSTORE_NATIVE_QUICK=1 shrinks the hypothesis example counts and the
# multi-MB cases (see the tests);
# mk/valgrind-python.supp hides the interpreter's own false positives.

NATIVE_PY ?= .venv/bin/python
NATIVE_CC ?= gcc
# One folder per checkout: `make asan` empties it first, so two checkouts'
# runs at once (parallel worktrees) must not share it.
NATIVE_TMP ?= $(or $(TMPDIR),/tmp)/cpstore-native-check-$(shell printf %s '$(CURDIR)' | cksum | cut -d' ' -f1)
NATIVE_TESTS ?= tests/test_native_agrees_with_reference.py tests/test_native_errors.py tests/test_native_chunker.py tests/test_native_ingest.py tests/test_native_canonical.py
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

.PHONY: asan valgrind

asan:
	rm -rf $(NATIVE_TMP)/asan && mkdir -p $(NATIVE_TMP)/asan/cpstore
	cp -r csrc $(NATIVE_TMP)/asan/
	# cffi chdirs into tmpdir while compiling, so build.py's csrc/ paths
	# resolve against the copy above.
	CC=$(NATIVE_CC) CPSTORE_CFLAGS="-O1 -g $(SAN_FLAGS)" CPSTORE_LDFLAGS="$(SAN_FLAGS)" \
	  $(NATIVE_PY) -c "import build; build.ffibuilder.compile(tmpdir='$(NATIVE_TMP)/asan')"
	# The package's sources, subpackages included (not the unsanitized build).
	cd cpstore && find . \( -name '*.py' -o -name py.typed \) -exec cp --parents {} $(NATIVE_TMP)/asan/cpstore/ \;
	PYTHONPATH=$(NATIVE_TMP)/asan \
	LD_PRELOAD="$$($(NATIVE_CC) -print-file-name=libasan.so) $$($(NATIVE_CC) -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(NATIVE_PY) -P -c "import sys, cpstore._cpstore_native as m; sys.exit(0 if m.__file__.startswith('$(NATIVE_TMP)') else 'asan: imported ' + m.__file__ + ', not the sanitized build')"
	PYTHONPATH=$(NATIVE_TMP)/asan \
	LD_PRELOAD="$$($(NATIVE_CC) -print-file-name=libasan.so) $$($(NATIVE_CC) -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(NATIVE_PY) -P -m pytest -q -p no:cacheprovider $(NATIVE_TESTS)
	@echo "asan: ASan+UBSan run of $(NATIVE_TESTS) finished with no sanitizer report"

valgrind:
	PYTHONMALLOC=malloc CPSTORE_NATIVE_QUICK=1 \
	  valgrind --tool=memcheck --error-exitcode=99 --leak-check=no --track-origins=yes \
	    --suppressions=mk/valgrind-python.supp --quiet \
	  $(NATIVE_PY) -m pytest -q -p no:cacheprovider -x $(NATIVE_TESTS)
	@echo "valgrind: memcheck run of $(NATIVE_TESTS) reported no errors"
