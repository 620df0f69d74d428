! powerperf.f90 - Fortran interface to powerperf-rt region markers (include/powerperf.h).
!
!   use powerperf
!   ierr = pp_region_begin("solve")
!   ...
!   ierr = pp_region_end("solve")
!
! Names are Fortran strings (trailing blanks are removed); the module appends the NUL.
! Return values are those of the C functions: 0 or a negative errno (see powerperf.h).
! Link with -lpowerperf_rt.
module powerperf
  use, intrinsic :: iso_c_binding, only: c_int, c_int32_t, c_char, c_null_char
  implicit none
  private
  public :: pp_region_begin, pp_region_end, pp_region_handle, &
            pp_region_begin_h, pp_region_end_h, pp_flush, pp_enabled, pp_handle_kind

  integer, parameter :: pp_handle_kind = c_int32_t

  interface
    function c_pp_region_begin(name) bind(C, name="pp_region_begin") result(r)
      import :: c_int, c_char
      character(kind=c_char), dimension(*), intent(in) :: name
      integer(c_int) :: r
    end function
    function c_pp_region_end(name) bind(C, name="pp_region_end") result(r)
      import :: c_int, c_char
      character(kind=c_char), dimension(*), intent(in) :: name
      integer(c_int) :: r
    end function
    function c_pp_region_handle(name) bind(C, name="pp_region_handle") result(r)
      import :: c_int32_t, c_char
      character(kind=c_char), dimension(*), intent(in) :: name
      integer(c_int32_t) :: r
    end function
    function pp_region_begin_h(h) bind(C, name="pp_region_begin_h") result(r)
      import :: c_int, c_int32_t
      integer(c_int32_t), value :: h
      integer(c_int) :: r
    end function
    function pp_region_end_h(h) bind(C, name="pp_region_end_h") result(r)
      import :: c_int, c_int32_t
      integer(c_int32_t), value :: h
      integer(c_int) :: r
    end function
    subroutine pp_flush() bind(C, name="pp_flush")
    end subroutine
    function pp_enabled() bind(C, name="pp_enabled") result(r)
      import :: c_int
      integer(c_int) :: r
    end function
  end interface

contains

  integer function pp_region_begin(name)
    character(len=*), intent(in) :: name
    pp_region_begin = c_pp_region_begin(trim(name) // c_null_char)
  end function

  integer function pp_region_end(name)
    character(len=*), intent(in) :: name
    pp_region_end = c_pp_region_end(trim(name) // c_null_char)
  end function

  integer(c_int32_t) function pp_region_handle(name)
    character(len=*), intent(in) :: name
    pp_region_handle = c_pp_region_handle(trim(name) // c_null_char)
  end function

end module powerperf
