# Every dependency comes from a Debian package (installed by tools/setup.sh);
# nothing is vendored or downloaded at build time.
find_package(Threads REQUIRED)
find_package(cppzmq 4.9 REQUIRED)          # cppzmq-dev, pulls libzmq3-dev
find_package(Protobuf 3.21 REQUIRED)       # libprotobuf-dev, protobuf-compiler
find_package(spdlog 1.10 REQUIRED)         # libspdlog-dev (with libfmt-dev)
find_package(fmt REQUIRED)
find_package(CLI11 2.1 REQUIRED)           # libcli11-dev
find_package(ZLIB REQUIRED)                # zlib1g-dev
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)  # libopenblas-dev
find_package(OpenSSL 3 REQUIRED)          # libssl-dev: SHA-256 on the CPU's SHA instructions, for the exchange's sum digests
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)  # libsodium-dev (ZeroMQ's CURVE uses it too): BLAKE2b sum digests, key checks
pkg_check_modules(MICROHTTPD REQUIRED IMPORTED_TARGET libmicrohttpd)  # libmicrohttpd-dev: the live metrics' HTTP server

if(DCTRAIN_BUILD_TESTS)
  find_package(GTest REQUIRED)             # libgtest-dev, libgmock-dev
endif()
