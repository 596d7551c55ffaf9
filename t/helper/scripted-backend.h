/* scripted-backend.h - the scripted test backend ("script"): see scripted-backend.c. */
#ifndef CAPY_T_SCRIPTED_BACKEND_H
#define CAPY_T_SCRIPTED_BACKEND_H

/* Make the "script" device available to capy_engine_new; -1 if the backend table is full. */
int capy_scripted_backend_register(void);

#endif
