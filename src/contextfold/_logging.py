"""The library logger. contextfold never configures handlers; applications do."""

import logging

logger = logging.getLogger("contextfold")
