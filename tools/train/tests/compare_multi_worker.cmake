# Runs distribute-train on 2 MPI workers x 1 replica and on one process of 2
# replicas with the same settings; every epoch's loss, accuracy and test
# accuracy must print the same. Variables: TRAIN, MPIEXEC, MPIRUN_FLAGS (a list).
set(args --epochs 3 --batch-size 60 --seed 5)
execute_process(COMMAND ${TRAIN} --replicas 2 ${args} OUTPUT_VARIABLE single RESULT_VARIABLE single_rc)
execute_process(COMMAND ${MPIEXEC} -np 2 ${MPIRUN_FLAGS} ${TRAIN} --strategy multi_worker --replicas 1 ${args}
                OUTPUT_VARIABLE multi RESULT_VARIABLE multi_rc)
if(NOT single_rc EQUAL 0 OR NOT multi_rc EQUAL 0)
  message(FATAL_ERROR "exit codes: single ${single_rc}, multi-worker ${multi_rc}\n${single}\n${multi}")
endif()
foreach(name single multi)
  string(REGEX MATCHALL "epoch [0-9]+/3  loss [0-9.]+  accuracy [0-9.]+  test_accuracy [0-9.]+" ${name}_epochs
         "${${name}}")
endforeach()
list(LENGTH single_epochs count)
if(NOT count EQUAL 3 OR NOT single_epochs STREQUAL multi_epochs)
  message(FATAL_ERROR "the runs differ:\nsingle process:\n${single}\nmulti-worker:\n${multi}")
endif()
message(STATUS "same learning curve: ${single_epochs}")
