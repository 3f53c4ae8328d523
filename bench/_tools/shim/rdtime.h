#include "rd.h"
