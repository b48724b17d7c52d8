# Thin wrapper: ./dev does the work (and the set-up), so a machine without
# make loses nothing. `make bench` = `./dev bench`.
.PHONY: setup demo test bench lint asan valgrind
setup demo test bench lint:
	./dev $@
asan:
	./dev asan
valgrind:
	$(MAKE) -f mk/native.mk valgrind NATIVE_PY=.venv/bin/python
