/* A stand-in for the NVIDIA driver library (libcuda.so.1) with nothing in it:
 * with it on LD_LIBRARY_PATH, ratiocheck's CUDA loader finds "a driver", opens
 * its CUDA module and asks the module's own probe, which then answers that
 * the driver is unusable. test_cli checks that path (dlopen, the module's
 * symbols, the core's functions it calls in the executable) on machines
 * without a GPU. */
int rc_fake_libcuda;
