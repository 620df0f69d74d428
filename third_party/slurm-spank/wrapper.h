#include <slurm/spank.h>
