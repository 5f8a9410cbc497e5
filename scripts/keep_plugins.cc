// Preloaded by scripts/sanitize only: dlclose does nothing, so the OpenMPI and PMIx plugins that
// MPI_Finalize unloads stay mapped until exit and LeakSanitizer can name them in its stacks (the
// suppressions in scripts/lsan.supp match library names). Never part of an installed program.
extern "C" int dlclose(void* /*handle*/) { return 0; }
